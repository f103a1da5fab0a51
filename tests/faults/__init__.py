"""Faults the server must survive, rehearsed against real processes: engines killed or stopped
(idle and busy), crashing at every start, model files gone; see also tests/e2e/test_operations.py
(stall, drain), tests/e2e/test_api_keys.py (key brute force) and the store-fault tests."""
