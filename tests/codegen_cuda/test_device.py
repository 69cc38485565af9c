"""Device discovery answers without raising, and says why there is no device."""

from __future__ import annotations

from ember.codegen_cuda import device


def test_probe_never_raises_and_explains():
    devices, reason = device._probe()
    lines = device.describe()
    assert lines and lines[0].startswith("nvrtc")
    if not devices:
        assert device.device_available() is False and device.visible_arch() is None
        assert reason and any(reason in line for line in lines)


def test_visible_arch_from_compute_capability(monkeypatch):
    monkeypatch.setattr(device, "_probe", lambda: ([("Fake H100", 9, 0, 80 * 2**30)], ""))
    assert device.device_available() and device.visible_arch() == "sm_90"
    assert any("cuda:0 Fake H100, sm_90, 80.0 GiB" in line for line in device.describe())
