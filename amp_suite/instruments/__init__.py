"""What a cell measures with: step timers and peak memory (`timers`), the GPU's clocks, power and
throttling over the timed region (`gpu_state`, over `nvml`), and the one-step diagnostics
(FLOPs, dtype audit, host syncs, non-finite values, gradient underflow)."""
