"""Fitting a request into the context: old turns go first, whole, and the newest stays."""

from __future__ import annotations

from typing import Any

from luna.agent.fit import LEFT_OUT_NOTE, ContextFit


def history(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "S"}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"question {i} " * 20})
        msgs.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "r" * 3000})
        msgs.append({"role": "assistant", "content": f"answer {i} " * 20})
    return [*msgs, {"role": "user", "content": "and now?"}]  # fmt: skip


def test_fit_drops_whole_old_turns_and_keeps_the_newest_message() -> None:
    fit = ContextFit(131072, 4096)
    trimmed = fit.shrink(history(50), None, 4000)
    assert trimmed is not None and fit.estimate(trimmed.messages, None) <= 4000
    kept = trimmed.messages
    assert kept[0]["role"] == "system" and LEFT_OUT_NOTE in kept[0]["content"]
    assert kept[1]["role"] == "user" and kept[-1]["content"] == "and now?"
    calls = {c["id"] for m in kept for c in m.get("tool_calls") or []}
    results = {m["tool_call_id"] for m in kept if m["role"] == "tool"}
    assert calls == results  # no call separated from its result
    assert trimmed.dropped_messages == len(history(50)) - len(kept)


def test_fit_a_huge_history_is_trimmed_in_one_linear_pass() -> None:
    fit = ContextFit(131072, 4096)
    messages = history(2500)  # 10,000 messages (a quadratic trim took ~20 s on these)
    trimmed = fit.shrink(messages, None, 8000)
    assert trimmed is not None and len(trimmed.messages) < 100


def test_fit_refuses_when_the_newest_message_alone_does_not_fit() -> None:
    fit = ContextFit(131072, 4096)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "w " * 50_000}]
    assert fit.shrink(messages, None, 2000) is None


def chat(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are Luna. " * 40}]
    for i in range(turns):
        msgs += [{"role": "user", "content": f"day {i}: water the tulips " * 3},
                 {"role": "assistant", "content": "ok"}]  # fmt: skip
    return [*msgs, {"role": "user", "content": "and today?"}]


def test_fit_succeeds_at_every_target_the_kept_part_fits() -> None:
    """Found by the cold-start bench: a short message in a long chat was refused as "too
    long" when the dropped turns freed just enough room but the left-out note did not fit."""
    fit = ContextFit(131072, 4096)
    messages = chat(60)
    smallest = fit.estimate(
        [{**messages[0], "content": f"{messages[0]['content']}\n\n{LEFT_OUT_NOTE}"}, messages[-1]],
        None,
    )
    for target in range(smallest, fit.estimate(messages, None) + 2):
        trimmed = fit.shrink(messages, None, target)
        assert trimmed is not None, target
        assert fit.estimate(trimmed.messages, None) <= target, target
        assert trimmed.messages[-1]["content"] == "and today?"
