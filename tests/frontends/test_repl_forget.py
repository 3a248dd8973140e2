"""``/sessions`` and ``/forget-session`` in the real REPL (piped: only with ``--yes``)."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.test_repl import start_repl


def test_repl_forget_session_needs_yes_when_piped_and_moves_to_a_new_session(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="Noted."), Reply(content="Hi."))
    proc = start_repl(tmp_path, llm_server.url)
    script = (
        "/session\nmy bike lock code is 4471\n/sessions\n/forget-session\n"
        "/forget-session --yes\n/sessions\n/forget-session nosuch --yes\nhello\n/session\n"
    )
    out, err = proc.communicate(script, timeout=120)
    assert proc.returncode == 0, err
    first = out.split("session ", 1)[1].split()[0]
    assert f"  {first} (this one)  repl  " in out and "2 messages, 0 files" in out
    assert f"not asked without a terminal: /forget-session {first} --yes" in out
    assert f"forgot session {first}: 2 messages, 0 memories, 0 files removed" in out
    assert "no sessions yet" in out and "no session nosuch" in out
    second = out.split("new session ", 1)[1].split()[0]
    assert second != first and out.rstrip().endswith(f"session {second}")
    # the message after the forget starts afresh, in the new session
    assert [m["role"] for m in llm_server.requests[-1]["messages"]] == ["system", "user"]
    assert (tmp_path / "data" / "repl_session").read_text().strip() == second
