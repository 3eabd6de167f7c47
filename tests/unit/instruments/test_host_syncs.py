"""Host-device synchronisations per training step: fp16's GradScaler reads one flag per step,
bf16 and fp32 none. On a CPU the count is of the reads that would synchronise on a GPU."""

from __future__ import annotations

import torch

from amp_suite.hardware.backends import backend_of
from amp_suite.instruments.diagnostics.host_syncs import count_host_syncs

CPU = backend_of("cpu")


def _adam_with_state() -> tuple[torch.nn.Linear, torch.optim.Optimizer]:
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()  # creates the step counters, which torch keeps on the host on every device
    return model, optimizer


def test_reads_of_device_values_count_and_the_optimizers_step_counters_do_not():
    model, optimizer = _adam_with_state()
    with count_host_syncs(CPU, optimizer) as syncs:
        loss = model(torch.ones(1, 4)).sum()
        loss.backward()
        optimizer.step()  # AdamW reads each step counter with .item(): exempt
        assert syncs.count == 0
        loss.item()
        bool(loss > 0)
        loss.detach().tolist()
    assert syncs.count == 3
    assert torch.Tensor.item.__qualname__ == "TensorBase.item"  # restored


def test_an_optimizers_first_step_makes_its_counters_and_reading_them_is_no_sync():
    """Side by side with a short warmup, the counted step can be the cell's first: the counters the
    optimizer makes in it are exempt too."""
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    with count_host_syncs(CPU, optimizer) as syncs:
        model(torch.ones(1, 4)).sum().backward()
        optimizer.step()
    assert optimizer.state and syncs.count == 0


def test_gradscaler_step_reads_the_overflow_flag_once():
    model, optimizer = _adam_with_state()
    scaler = torch.amp.GradScaler("cpu")
    with count_host_syncs(CPU, optimizer) as syncs:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.ones(1, 4)).float().sum()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    assert syncs.count == 1
