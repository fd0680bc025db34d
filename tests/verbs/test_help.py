"""Every client verb's ``--help`` names what it does, its options and its exit codes (issue 22)."""

from __future__ import annotations

from tests.verbs.fake_hosts import verb


def test_each_verbs_help_is_complete() -> None:
    options = {
        "send": ["-m TEXT", "--interrupt", "--steer", "--label", "--store", "--socket",
                 "--timeout"],
        "watch": ["--json", "--from CURSOR", "--store", "--socket", "--timeout"],
        "cancel": ["--store", "--socket", "--timeout"],
        "stop": ["--store", "--socket", "--timeout", "paused", "queued", "PostgreSQL"],
        "status": ["--json", "--store", "--socket", "--timeout"],
        "attach": ["--agent NAME", "--host URL", "--token-file", "--exit-when-idle", "--store",
                   "--socket", "--startup-timeout", "AGENT_CMD"],
    }  # fmt: skip
    for name, expected in options.items():
        shown = verb(name, "--help")
        assert shown.returncode == 0, shown.stderr
        text = " ".join(shown.stdout.split())
        for option in expected:
            assert option in text, (name, option)
        assert "Exit codes: 0" in text and "2 usage error" in text and "3 " in text, name
