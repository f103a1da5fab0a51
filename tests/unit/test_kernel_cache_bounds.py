"""The engine's bounds on the CPU plugin's JIT kernel caches: applied on the CPU by default, and
never over what the operator set (a ``--plugin_config`` key, an environment variable)."""

from __future__ import annotations

from ovserve.engine.memory import (
    CPU_RUNTIME_CACHE_CAPACITY,
    DEFAULT_CPU_RUNTIME_CACHE_CAPACITY,
    DEFAULT_PRIMITIVE_CACHE_CAPACITY,
    bound_kernel_caches,
)


def test_a_cpu_pipeline_gets_both_bounds_beside_the_users_properties() -> None:
    environ: dict[str, str] = {}
    properties = bound_kernel_caches("CPU", {"KV_CACHE_PRECISION": "u8"}, environ)
    assert properties == {
        "KV_CACHE_PRECISION": "u8",
        CPU_RUNTIME_CACHE_CAPACITY: DEFAULT_CPU_RUNTIME_CACHE_CAPACITY,
    }
    assert environ == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(DEFAULT_PRIMITIVE_CACHE_CAPACITY)}


def test_the_users_runtime_cache_capacity_wins() -> None:
    properties = bound_kernel_caches("CPU", {CPU_RUNTIME_CACHE_CAPACITY: 5000}, {})
    assert properties[CPU_RUNTIME_CACHE_CAPACITY] == 5000


def test_a_primitive_cache_capacity_from_the_environment_is_kept() -> None:
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"):
        environ = {name: "1024"}
        bound_kernel_caches("CPU", {}, environ)
        assert environ == {name: "1024"}


def test_other_devices_get_the_plugin_config_unchanged() -> None:
    environ: dict[str, str] = {}
    config = {"PERFORMANCE_HINT": "LATENCY"}
    assert bound_kernel_caches("GPU", config, environ) == config
    assert environ == {}


def test_the_users_plugin_config_is_not_modified() -> None:
    config = {"KV_CACHE_PRECISION": "u8"}
    bound_kernel_caches("CPU", config, {})
    assert config == {"KV_CACHE_PRECISION": "u8"}
