"""A corpus of bad settings files, each run through the real CLI (``fair-router check`` on
``fair_router.cli:main``): exit status 2, a message naming the file, the key and the value (or what is wrong
with the file as a whole), a few KB at most whatever the input, and no traceback. An empty file is a
warning, not an error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from fair_router.cli import main
from fair_router.config.settings import Settings

MB = 1_000_000


def many(key: str, n: int, value: str = "1") -> str:
    return f"{key}:\n" + "".join(f"  q{i}: {value}\n" for i in range(n))


def rules(n: int) -> str:
    return "jobs:\n  app.task:\n    rules:\n" + "".join(f"      - {{queue: q, threshold: {i + 1}, per: 1h}}\n"
                                                     for i in range(n))


def job(body: str) -> str:
    return f"jobs:\n  app.task: {body}\n"


def rule(body: str) -> str:
    return f"jobs:\n  app.task:\n    rules:\n      - {body}\n"


def tiers(body: str) -> str:
    return f"tiers: {body}\n"


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8))

# (id, file content, substrings the message must hold besides the file name)
CORPUS: list[tuple[str, str | bytes, list[str]]] = [
    # -- the file as a whole
    ("dup-top-level", "prefix: a\nprefix: b\n", ["duplicate key 'prefix'", "line 2"]),
    ("dup-queue", "queues:\n  a: 1\n  b: 2\n  a: 3\n", ["duplicate key 'a'", "line 4", "first on line 2"]),
    ("dup-job", "jobs:\n  x.y: {}\n  x.y: {queue: q}\n", ["duplicate key 'x.y'"]),
    ("dup-tier", tiers("{concurrency: {free: 1, free: 2}}"), ["duplicate key 'free'"]),
    ("dup-rule-field", rule("{queue: a, queue: b, threshold: 1, per: 1h}"), ["duplicate key 'queue'"]),
    ("dup-int-key", "pool:\n  1: 1\n  1: 2\n", ["duplicate key 1"]),
    ("alias", "base: &x 1\nqueues: {q: *x}\n", ["alias *x", "line 2"]),
    ("alias-bomb", BOMB, ["alias *a", "line 2"]),
    ("merge-key", "base: &b {queue: q}\njobs:\n  app.task:\n    <<: *b\n", ["alias *b"]),
    ("over-1mb", "# " + "x" * MB + "\n", ["over 1,000,000 bytes"]),
    ("5mb-of-queues", many("queues", 400_000), ["over 1,000,000 bytes"]),
    ("not-utf8", b"prefix: \xff\xfe\n", ["not UTF-8", "byte 8"]),
    ("top-level-list", "- a\n- b\n", ["YAML mapping", "list", "['a', 'b']"]),
    ("top-level-scalar", "just text\n", ["YAML mapping", "str", "'just text'"]),
    ("unclosed-bracket", "queues: [a, b\n", ["malformed YAML", "line 2"]),
    ("tab-indent", "queues:\n\ta: 1\n", ["malformed YAML", "line 2"]),
    ("bad-indent", "jobs:\n  a.b:\n    queue: q\n   rules: []\n", ["malformed YAML", "line 4"]),
    ("huge-int", "pool: {a: 123456789012345678901234567890123456789}\n", ["integer of 39 digits", "line 1"]),
    ("unknown-key", "redis_uri: redis://x\n", ["redis_uri", "Extra inputs are not permitted", "redis://x"]),
    ("redis-url-list", "redis_url: [a]\n", ["redis_url", "valid string", "['a']"]),
    # -- an unknown key names the key it was probably meant to be, else the keys its place takes
    ("unknown-key-near", "redis_ur: redis://x\n", ["redis_ur", "redis://x", "did you mean 'redis_url'?"]),
    ("unknown-nested-key", "concurrency: {enable: true}\n", ["concurrency.enable", "did you mean 'enabled'?"]),
    ("unknown-job-key", job("{queues: [a]}"), ["app.task", "queues", "did you mean 'queue'?"]),
    ("unknown-rule-key", rule("{queue: q, threshold: 1, per: 1h, limit: 3}"),
     ["rules[0].limit", "the keys here are queue, threshold, per"]),
    # -- prefix
    ("prefix-braces", "prefix: 'a{b}'\n", ["prefix", "no braces", "'a{b}'"]),
    ("prefix-empty", "prefix: ''\n", ["prefix", "got ''"]),
    ("prefix-101", f"prefix: {'p' * 101}\n", ["prefix", "1-100", "ppppp"]),
    ("prefix-500kb", f"prefix: {'p' * 500_000}\n", ["prefix", "no braces", "ppppp", "characters)"]),
    # -- queues
    ("weight-1e308", "queues: {a: 1e308}\n", ["queues.a", "up to 1e+06", "'1e308'"]),
    ("weight-2e6", "queues: {a: 2000000}\n", ["queues.a", "up to 1e+06", "2000000"]),
    ("weight-negative", "queues: {a: -1}\n", ["queues.a", "positive", "-1"]),
    ("weight-zero", "queues: {a: 0}\n", ["queues.a", "positive", "got 0"]),
    ("weight-inf", "queues: {a: .inf}\n", ["queues.a", "got inf"]),
    ("weight-nan", "queues: {a: .nan}\n", ["queues.a", "got nan"]),
    ("weight-word", "queues: {a: fast}\n", ["queues.a", "'fast'"]),
    ("weight-bool", "queues: {a: true}\n", ["queues.a", "True"]),
    ("queue-name-space", "queues: {'a b': 1}\n", ["queues", "queue name", "'a b'"]),
    ("queue-name-201", f"queues: {{{'q' * 201}: 1}}\n", ["queues", "1-200", "qqqq"]),
    ("1001-queues", many("queues", 1001), ["queues", "at most 1000 queues", "got 1001"]),
    ("1001-fair-queues", "fair_queues: [" + ", ".join(f"q{i}" for i in range(1001)) + "]\n",
     ["fair_queues", "at most 1000 fair queues", "got 1001"]),
    ("fair-queue-name", "fair_queues: ['a:b']\n", ["fair_queues[0]", "'a:b'"]),
    ("fair-charge", "fair_charge: time\n", ["fair_charge", "'time'"]),
    ("trust-cost", "fair_trust_cost: maybe\n", ["fair_trust_cost", "'maybe'"]),
    # -- pool
    ("pool-zero", "pool: {a: 0}\n", ["pool.a", "greater than or equal to 1", "got 0"]),
    ("pool-2e9", "pool: {a: 2000000000}\n", ["pool.a", "less than or equal to 1000000000", "2000000000"]),
    ("pool-key", "pool: {'a;b': 1}\n", ["pool", "'a;b'"]),
    ("1001-pool", many("pool", 1001), ["pool", "at most 1000 pool entries", "got 1001"]),
    # -- jobs and rules
    ("1001-jobs", "jobs:\n" + "".join(f"  m.f{i}: {{}}\n" for i in range(1001)), ["jobs", "at most 1000 jobs"]),
    ("threshold-zero", rule("{queue: q, threshold: 0, per: 1h}"), ["rules[0].threshold", "greater than 0", "got 0"]),
    ("threshold-1e10", rule("{queue: q, threshold: 10000000000, per: 1h}"),
     ["rules[0].threshold", "less than or equal to 1000000000", "10000000000"]),
    ("threshold-word", rule("{queue: q, threshold: many, per: 1h}"), ["rules[0].threshold", "'many'"]),
    ("per-400d", rule("{queue: q, threshold: 1, per: 400d}"), ["rules[0].per", "at most 366d", "'400d'"]),
    ("per-1e308", rule("{queue: q, threshold: 1, per: 1e308}"), ["rules[0].per", "'1e308'"]),
    ("per-huge-seconds", rule("{queue: q, threshold: 1, per: 99999999999}"), ["rules[0].per", "at most 366d"]),
    ("per-zero", rule("{queue: q, threshold: 1, per: 0}"), ["rules[0].per", "at least 1ms", "got 0"]),
    ("per-week", rule("{queue: q, threshold: 1, per: 1 week}"), ["rules[0].per", "'1 week'"]),
    ("rule-queue-brace", rule("{queue: 'q{x}', threshold: 1, per: 1h}"), ["rules[0].queue", "'q{x}'"]),
    ("rule-extra-key", rule("{queue: q, threshold: 1, per: 1h, limit: 3}"), ["rules[0].limit", "Extra inputs"]),
    ("101-rules", rules(101), ["app.task", "rules", "at most 100 rules per job", "got 101"]),
    ("rate-zero", job("{rate: 0/s}"), ["app.task", "rate", "'0/s'"]),
    ("rate-2m-per-s", job("{rate: 2000000/s}"), ["app.task", "rate", "at most 1e+06", "'2000000/s'"]),
    ("rate-exponent", job("{rate: 1e9/s}"), ["app.task", "rate", "'1e9/s'"]),
    ("burst-without-rate", job("{burst: 5}"), ["app.task", "burst is set without a rate"]),
    ("burst-zero", job("{rate: 1/s, burst: 0}"), ["app.task", "burst", "got 0"]),
    ("job-unknown-key", job("{queues: [a]}"), ["app.task", "queues", "Extra inputs"]),
    ("job-queue-name", job("{queue: 'a/b'}"), ["app.task", "queue", "'a/b'"]),
    # -- tiers
    ("tier-default-unknown", tiers("{default: gold}"), ["tiers", "unknown tier", "'gold'"]),
    ("tier-priority-unknown", tiers("{priority: [platinum]}"), ["tiers", "unknown tier", "'platinum'"]),
    ("tier-limit-zero", tiers("{concurrency: {free: 0}}"), ["tiers.concurrency.free", "got 0"]),
    ("tier-weight-2e6", tiers("{weights: {free: 2000000}}"), ["tiers.weights.free", "1000000", "2000000"]),
    ("tier-weight-1e308", tiers("{weights: {free: 1e308}}"), ["tiers.weights.free", "'1e308'"]),
    ("tier-rate-word", tiers("{rate: {free: fast}}"), ["tiers.rate.free", "'fast'"]),
    ("tier-resolver-module", tiers("{resolver: 'no_such_module_x:fn'}"), ["tiers.resolver", "no_such_module_x"]),
    ("tier-resolver-colon", tiers("{resolver: nocolon}"), ["tiers.resolver", "'nocolon'"]),
    ("tier-name", tiers("{concurrency: {'a b': 1}}"), ["tiers.concurrency", "tier name", "'a b'"]),
    ("1001-tiers", "tiers:\n  default: q0\n  priority: []\n" + many("  concurrency", 1001).replace("\n  q", "\n    q"),
     ["tiers.concurrency", "at most 1000 tiers", "got 1001"]),
    # -- concurrency, recovery, observe, tenant ids
    ("enabled-word", "concurrency: {enabled: perhaps}\n", ["concurrency.enabled", "'perhaps'"]),
    ("lease-367d", "concurrency: {lease_ttl: 367d}\n", ["concurrency.lease_ttl", "at most 366d", "'367d'"]),
    ("abandon-1s", "recovery: {abandon_after: 1s}\n", ["recovery.abandon_after", "at least 3s", "1s"]),
    ("retention-1h", "observe: {retention: 1h}\n", ["observe.retention", "at least 62m", "3600s"]),
    ("flush-2m", "observe: {flush_interval: 2m}\n", ["observe.flush_interval", "at most 60s", "120s"]),
    ("top-tenants", "observe: {top_tenants: 5000}\n", ["observe.top_tenants", "1000", "5000"]),
    ("tenant-bytes-small", "tenant_max_bytes: 5\n", ["tenant_max_bytes", "16", "got 5"]),
    ("tenant-bytes-big", "tenant_max_bytes: 1000000\n", ["tenant_max_bytes", "65536", "1000000"]),
    ("many-errors", many("queues", 500, "-1"), ["queues.q0", "... and 480 more"]),
]


@pytest.mark.usefixtures("isolated_settings")
@pytest.mark.parametrize(("content", "wanted"), [case[1:] for case in CORPUS], ids=[case[0] for case in CORPUS])
def test_a_bad_settings_file_is_refused_with_a_short_clear_message(tmp_path: Path, content: str | bytes,
                                                                   wanted: list[str]) -> None:
    file = tmp_path / "corpus-case.yaml"
    if isinstance(content, bytes):
        file.write_bytes(content)
    else:
        file.write_text(content, encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(file)])
    output = result.output
    assert result.exit_code == 2, output[:2000]
    assert "Traceback" not in output and isinstance(result.exception, SystemExit)
    assert "corpus-case.yaml" in output
    for part in wanted:
        assert part in output, f"{part!r} not in {output[:2000]!r}"
    assert len(output) < 4096
    assert "settings OK" not in output


def test_the_corpus_has_at_least_sixty_cases() -> None:
    assert len(CORPUS) >= 60 and len({case[0] for case in CORPUS}) == len(CORPUS)


@pytest.mark.usefixtures("isolated_settings")
@pytest.mark.parametrize("content", ["", "# only a comment\n", "---\n", "\n\n"])
def test_an_empty_settings_file_is_a_warning_and_the_defaults(tmp_path: Path, content: str) -> None:
    file = tmp_path / "empty.yaml"
    file.write_text(content)
    result = CliRunner().invoke(main, ["check", str(file)])
    assert result.exit_code == 0, result.output
    assert f"warning: {file}: the settings file is empty" in result.output
    assert "settings OK" in result.output and "prefix:    fair_router" in result.output


@pytest.mark.usefixtures("isolated_settings")
def test_the_example_settings_file_passes(tmp_path: Path) -> None:
    example = Path(__file__).parent.parent / "config.example.yaml"
    app = tmp_path / "myapp"  # the job key the example configures must import (check's cross-reference)
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text("from fair_router import fair_job\n\n\n@fair_job('default')\n"
                                  "def process(account_id: str, item_id: int) -> None: ...\n")
    try:
        result = CliRunner().invoke(main, ["check", str(example), "--path", str(tmp_path)])
    finally:  # check imported this myapp in-process: it must not shadow the docs' own myapp later
        for name in [name for name in sys.modules if name == "myapp" or name.startswith("myapp.")]:
            del sys.modules[name]
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))
    assert result.exit_code == 0 and "warning" not in result.output, result.output


def test_the_example_settings_file_names_every_setting() -> None:
    example = yaml.safe_load((Path(__file__).parent.parent / "config.example.yaml").read_text())
    assert set(example) == set(Settings.model_fields), "config.example.yaml must list every setting"
