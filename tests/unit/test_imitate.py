"""The imitation's environment: caps, and a compile cache that is never the native one."""

import os

import pytest

from perfkit.imitate import IMITATIONS, imitation_env


@pytest.mark.parametrize("given, want", [
    (None, "/t/torchinductor_u.no-bf16"),              # nothing named: Inductor's default + suffix
    ("/t/torchinductor_u", "/t/torchinductor_u.no-bf16"),  # inherited from a native parent
    ("/c/mine", "/c/mine.no-bf16"),                    # named by hand: still not shared
    ("/c/mine.no-bf16", "/c/mine.no-bf16"),            # a child of an imitated parent
])
def test_an_imitation_always_gets_its_own_cache(monkeypatch, given, want):
    monkeypatch.setattr("tempfile.gettempdir", lambda: "/t")
    environ = {"USER": "u"} | ({"TORCHINDUCTOR_CACHE_DIR": given} if given else {})
    env = imitation_env("no-bf16", environ)
    assert env == {**IMITATIONS["no-bf16"], "TORCHINDUCTOR_CACHE_DIR": want}


def test_a_native_process_never_uses_an_imitations_cache(monkeypatch):
    monkeypatch.setattr("tempfile.gettempdir", lambda: "/t")
    assert imitation_env(None, {"TORCHINDUCTOR_CACHE_DIR": "/c/x.no-bf16"}) == {
        "TORCHINDUCTOR_CACHE_DIR": "/c/x"}
    assert imitation_env(None, {"USER": "u"}) == {"TORCHINDUCTOR_CACHE_DIR": "/t/torchinductor_u"}


def test_the_imitate_fixture_gives_children_the_imitations_cache(imitate):
    """What `make test` hands the processes it starts: capped ones never get the cache this
    (native) process's Inductor wrote into os.environ."""
    cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    if imitate:
        assert cache.endswith(f".{imitate}") and os.environ["ATEN_CPU_CAPABILITY"] == "avx2"
    else:
        assert not any(cache.endswith(f".{name}") for name in IMITATIONS)
