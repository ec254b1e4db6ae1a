"""pytest: parametrizes each test over the values its module lists in PARAMS (run.py reads the
same lists when pytest is not installed)."""


def pytest_generate_tests(metafunc):
    params = getattr(metafunc.module, "PARAMS", {}).get(metafunc.function.__name__)
    if params is not None and "world_size" in metafunc.fixturenames:
        metafunc.parametrize("world_size", params, ids=[f"ws{w}" for w in params])
