"""NVML access shared by `doctor` and the per-cell GPU state: by UUID, one guarded query per
reading, and clock-event reasons decoded from nvidia-ml-py's own constants (importable without a
GPU; no NVML call is made here)."""

from __future__ import annotations

import pynvml
import pytest
import torch

from amp_suite.hardware import doctor
from amp_suite.instruments import nvml
from amp_suite.instruments.nvml import SLOWDOWNS, NvmlDevice, decode_reasons, reason_names

DOCUMENTED = pynvml.nvmlClocksEventReasonAll | pynvml.nvmlClocksThrottleReasonAll


def test_every_documented_bit_decodes_to_exactly_one_name_and_no_name_twice():
    bits = [1 << position for position in range(DOCUMENTED.bit_length()) if DOCUMENTED >> position & 1]
    names = [decode_reasons(bit) for bit in bits]
    assert all(len(name) == 1 for name in names)
    flat = [name for (name,) in names]
    assert len(set(flat)) == len(flat) == len(bits)
    assert decode_reasons(DOCUMENTED) == flat
    assert {"board_limit", "reliability", "sw_thermal_slowdown", "applications_clocks_setting"} <= set(flat)
    assert set(reason_names().values()) == set(flat)


def test_slowdowns_are_documented_reasons_and_states_are_not_slowdowns():
    assert SLOWDOWNS <= set(reason_names().values())
    assert not {"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"} & SLOWDOWNS


def test_a_bit_nvml_does_not_document_is_shown_by_number_not_dropped():
    assert decode_reasons(0x4 | 1 << 40) == ["sw_power_cap", "bit_0x10000000000"]


class OldDriverNvml:
    """An R525-era driver: no clock-event-reasons entry point (only the older throttle call), and
    a GPU that does not report memory clocks."""

    def __init__(self) -> None:
        self.asked_for = None
        self.shut_down = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.asked_for = uuid
        return "handle"

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return 0x1 | 0x200  # idle, board limit

    def nvmlDeviceGetClockInfo(self, handle, clock):
        if clock == pynvml.NVML_CLOCK_MEM:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 1410

    def nvmlDeviceGetMaxClockInfo(self, handle, clock):
        return 1980

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return 400_000


@pytest.fixture
def uuid(monkeypatch):
    monkeypatch.setattr(nvml, "_torch_uuid", lambda device: "abcd")  # torch prints no prefix
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_query_falls_back_per_reading_and_names_what_is_missing(uuid):
    device = NvmlDevice.open(torch.device("cuda", 0), OldDriverNvml())
    assert device.nvml.asked_for == "GPU-abcd"
    assert device.clock_event_reasons() == 0x201  # the older call answered
    assert device.query("memory clock", "nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_MEM) is None
    assert device.query("fan speed", "nvmlDeviceGetFanSpeed") is None  # not in this module at all
    assert device.missing == ["memory clock", "fan speed"]


def test_doctor_reports_every_reading_it_got_by_uuid_when_one_fails(uuid):
    fake = OldDriverNvml()
    state = doctor.nvml_state(torch.device("cuda", 3), fake)
    assert fake.asked_for == "GPU-abcd" and fake.shut_down
    assert state == {
        "sm_clock_mhz": 1410,
        "sm_clock_max_mhz": 1980,
        "memory_clock_mhz": None,
        "power_limit_w": 400.0,
        "clock_event_reasons": ["gpu_idle", "board_limit"],
        "not_reported": ["memory clock"],
    }


def test_doctor_says_why_when_nvml_cannot_open(uuid):
    class NoDriver(OldDriverNvml):
        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    assert "error" in doctor.nvml_state(torch.device("cuda", 0), NoDriver())


class MigNvml(OldDriverNvml):
    """A MIG slice: NVML knows it by "MIG-<uuid>" only, the digits torch reports."""

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid != "MIG-abcd":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return super().nvmlDeviceGetHandleByUUID(uuid)


def test_a_mig_slice_is_found_by_its_mig_uuid_not_a_gpu_one(uuid, monkeypatch):
    device = NvmlDevice.open(torch.device("cuda", 0), MigNvml())
    assert device.uuid == device.nvml.asked_for == "MIG-abcd"
    assert nvml.nvml_uuid(torch.device("cuda", 0), MigNvml()) == "MIG-abcd"  # what the record names
    assert nvml.nvml_uuid(torch.device("cuda", 0), OldDriverNvml()) == "GPU-abcd"  # a whole GPU

    class NoDriver(OldDriverNvml):
        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    assert nvml.nvml_uuid(torch.device("cuda", 0), NoDriver()) == "GPU-abcd"  # the likeliest, unasked
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-abcd")
    assert nvml.nvml_uuid(torch.device("cuda", 0), NoDriver()) == "MIG-abcd"


def test_a_device_nvml_knows_by_neither_spelling_raises_and_shuts_nvml_down(uuid):
    class Unknown(OldDriverNvml):
        def nvmlDeviceGetHandleByUUID(self, uuid):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    fake = Unknown()
    with pytest.raises(pynvml.NVMLError):
        NvmlDevice.open(torch.device("cuda", 0), fake)
    assert fake.shut_down
