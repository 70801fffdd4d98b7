"""The engine: requests in, tokens out. Its worker runs speculative execution
(draft → verify → accept → rollback → commit) with the sampler, acceptance rule,
cost governor and stats; only it calls into the native target."""
