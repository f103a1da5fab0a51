"""Developer scripts (demo model builder, benchmarks); importable so tests can call them in-process."""
