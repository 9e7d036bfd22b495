"""Coverage-guided fuzzing (atheris / libFuzzer) of what reads hostile input.

    pip install -e '.[fuzz]'
    python -m bench.fuzz                      # every target, 60 s each
    python -m bench.fuzz --seconds 600 --targets robots links

The same components as the property-based suite (``tests/test_bad_input.py``),
driven by libFuzzer's mutations instead of hand-written strategies: seed
lines, URL canonicalization, robots.txt parsing and matching, ``Retry-After``
values, and link extraction from HTML in any declared charset. A target fails
when an exception escapes the component (a crash) or when one input takes
longer than ``--timeout`` seconds (a hang); libFuzzer writes the input to
``--artifacts`` so that it can become a regression test. Each target runs in
its own process, so one crash does not stop the others.

atheris is optional (``.[fuzz]``): the normal tests do not need it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS = ("seeds", "urls", "robots", "retry_after", "links")
CHARSETS = ("utf-8", "latin-1", "utf-7", "utf-16", "shift_jis", "gb18030", "x-unknown", "base64",
            "rot13", "", "utf-8; charset=utf-16")
_DONE = re.compile(r"Done (\d+) runs in (\d+) second")


# ---------------------------------------------------------------------- targets


def _seeds(fdp: object) -> None:
    from crawler.seeds import Seed, SeedError, parse_seed_lines

    add_scheme = fdp.ConsumeBool()  # type: ignore[attr-defined]
    raw = fdp.ConsumeBytes(fdp.remaining_bytes())  # type: ignore[attr-defined]
    lines = raw.splitlines(keepends=True)
    parsed = list(parse_seed_lines(lines, source="fuzz", add_scheme=add_scheme))
    assert all(isinstance(p, Seed | SeedError) for p in parsed)


def _urls(fdp: object) -> None:
    from crawler.urls import canonical_url, host_key, url_fingerprint

    scheme = fdp.PickValueInList(["http://", "https://", "HTTP://", "//", ""])  # type: ignore[attr-defined]
    text = scheme + fdp.ConsumeUnicodeNoSurrogates(4096)  # type: ignore[attr-defined]
    canon = canonical_url(text)
    if canon:
        assert canonical_url(canon) == canon, (text, canon)  # idempotent
        host_key(canon)
        url_fingerprint(canon)


def _robots(fdp: object) -> None:
    from crawler.robots.rules import Rules, prepare

    agent = fdp.PickValueInList(["BroadCrawl", "*", "", "Broad/1.0"])  # type: ignore[attr-defined]
    url = "http://a.test/" + fdp.ConsumeUnicodeNoSurrogates(64)  # type: ignore[attr-defined]
    body = fdp.ConsumeBytes(fdp.remaining_bytes())  # type: ignore[attr-defined]
    rules = Rules.parse(prepare(body), agent)
    assert rules.allowed(url) in (True, False)
    rules.delay  # noqa: B018 (computed property: must not raise)


def _retry_after(fdp: object) -> None:
    from crawler.backoff import retry_after_seconds

    value = fdp.ConsumeBytes(fdp.remaining_bytes())  # type: ignore[attr-defined]
    seconds = retry_after_seconds(value, 1_750_000_000.0)
    assert seconds is None or seconds >= 0


_SPIDER: list[object] = []


def _links(fdp: object) -> None:
    from scrapy.http import HtmlResponse

    charset = fdp.PickValueInList(list(CHARSETS))  # type: ignore[attr-defined]
    body = fdp.ConsumeBytes(fdp.remaining_bytes())  # type: ignore[attr-defined]
    headers = {"Content-Type": f"text/html; charset={charset}"} if charset else {}
    response = HtmlResponse(url="http://a.test/p", body=body, headers=headers)
    links = _spider().links(response)  # type: ignore[attr-defined]
    assert isinstance(links, list)


def _spider() -> object:
    if not _SPIDER:
        from scrapy.utils.test import get_crawler

        import crawler.settings
        from crawler.spiders.broad import BroadSpider

        project = {k: getattr(crawler.settings, k) for k in dir(crawler.settings) if k.isupper()}
        _SPIDER.append(BroadSpider.from_crawler(get_crawler(BroadSpider, project), seeds="-"))
    return _SPIDER[0]


FUNCTIONS: dict[str, Callable[[object], None]] = {
    "seeds": _seeds, "urls": _urls, "robots": _robots, "retry_after": _retry_after,
    "links": _links,
}


def fuzz_one(target: str, seconds: int, timeout: int, artifacts: Path) -> None:
    """Run inside the child process: instrument our code, then hand over to libFuzzer."""
    import atheris

    with atheris.instrument_imports(include=["crawler", "w3lib", "protego"]):
        import crawler.backoff
        import crawler.robots.rules
        import crawler.seeds
        import crawler.spiders.broad
        import crawler.urls  # noqa: F401
    if target == "links":
        _spider()
    function = FUNCTIONS[target]

    def one_input(data: bytes) -> None:
        function(atheris.FuzzedDataProvider(data))

    artifacts.mkdir(parents=True, exist_ok=True)
    atheris.Setup([sys.argv[0], f"-max_total_time={seconds}", f"-timeout={timeout}",
                   "-rss_limit_mb=4096", "-max_len=8192", f"-artifact_prefix={artifacts}/"],
                  one_input)
    atheris.Fuzz()


# ---------------------------------------------------------------------- driver


def run_target(target: str, seconds: int, timeout: int, artifacts: Path) -> dict[str, object]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.fuzz", "--child", target, "--seconds", str(seconds),
         "--timeout", str(timeout), "--artifacts", str(artifacts / target)],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=seconds * 3 + 120)
    output = proc.stdout + proc.stderr
    done = _DONE.search(output)
    found = sorted(p.name for p in (artifacts / target).glob("*")) \
        if (artifacts / target).exists() else []
    return {"target": target, "ok": proc.returncode == 0 and not found,
            "runs": int(done.group(1)) if done else None, "seconds": time.monotonic() - started,
            "artifacts": found, "tail": "" if proc.returncode == 0 else output[-2000:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    parser.add_argument("--seconds", type=int, default=60, help="per target (default 60)")
    parser.add_argument("--timeout", type=int, default=10,
                        help="seconds one input may take before it counts as a hang")
    parser.add_argument("--artifacts", type=Path, default=None,
                        help="where crashing inputs go (default: a temp folder, kept if any)")
    parser.add_argument("--child", choices=TARGETS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        fuzz_one(args.child, args.seconds, args.timeout, args.artifacts)
        return 0
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris is not installed: pip install -e '.[fuzz]'", file=sys.stderr)
        return 2
    artifacts = args.artifacts or Path(tempfile.mkdtemp(prefix="fuzz-"))
    results = []
    for target in args.targets:
        result = run_target(target, args.seconds, args.timeout, artifacts)
        results.append(result)
        print(f"{target:12} {'ok' if result['ok'] else 'FOUND SOMETHING':16} "
              f"{result['runs'] or '?':>9} inputs in {result['seconds']:.0f} s"
              + (f"  artifacts: {result['artifacts']}" if result["artifacts"] else ""),
              flush=True)
        if result["tail"]:
            print(result["tail"])
    bad = [r for r in results if not r["ok"]]
    print(f"\n{len(results) - len(bad)} of {len(results)} targets clean; "
          f"artifacts in {artifacts}" if bad else f"\nall {len(results)} targets clean")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
