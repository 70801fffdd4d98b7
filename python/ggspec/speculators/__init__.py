"""Speculation algorithms: what proposes the draft tokens the target verifies."""
