"""Test data."""
