"""Date expressions in a recall query: explicit dates, and dates relative to the day it is asked."""

from __future__ import annotations

import datetime as dt

import pytest

from luna.memory import Memory
from luna.memory.recall.dates import date_windows
from luna.memory.recall.query import plan_query

TODAY = dt.date(2026, 12, 2)  # a Wednesday


@pytest.mark.parametrize(
    ("text", "window"),
    [
        # the event's days, from one day before to 8 days after, never past tomorrow + 1
        ("what did we cook yesterday?", ("2026-11-30", "2026-12-04")),
        ("the day before yesterday", ("2026-11-29", "2026-12-04")),
        ("anything today?", ("2026-12-01", "2026-12-04")),
        ("where was I last week", ("2026-11-22", "2026-12-04")),  # Mon 23 - Sun 29 Nov
        ("what did we do last weekend", ("2026-11-27", "2026-12-04")),  # Sat 28, Sun 29
        ("this week so far", ("2026-11-29", "2026-12-04")),
        ("last month's bills", ("2026-10-31", "2026-12-04")),  # November
        ("three days ago", ("2026-11-27", "2026-12-04")),  # 29 Nov, give or take a day
        ("2 weeks ago", ("2026-11-10", "2026-12-03")),  # 18 Nov, give or take a week
        ("a few months ago", ("2026-08-03", "2026-10-11")),  # 3 Sep, give or take 30 days
        ("what did I plant in May?", ("2026-04-30", "2026-06-08")),  # the last May begun
        ("in early December", ("2026-11-30", "2026-12-04")),  # this month, so far
        ("last December", ("2025-11-30", "2026-01-08")),
        ("since March", ("2026-02-28", "2026-04-08")),
        ("last Tuesday", ("2026-11-30", "2026-12-04")),  # yesterday was Tuesday
        ("on Wednesday", ("2026-11-24", "2026-12-03")),  # a week ago: never today
        ("last year", ("2024-12-31", "2026-01-08")),
    ],
)
def test_relative_dates_resolve_against_today(text: str, window: tuple[str, str]) -> None:
    windows, spans = date_windows(text, TODAY)
    assert windows == [window]
    assert len(spans) == 1


@pytest.mark.parametrize(
    "text",
    [
        "May I ask what we ate?",  # a verb, not a month
        "march on, then",
        "may we go?",
        "Where did Caroline move from 4 years ago?",  # years ago: beyond any chat history
        "what is the date",
        "",
        "on 1 January, 0001",  # the window would start before the calendar does
        "9999-12-31",
        "in December 9999",
    ],
)
def test_words_that_are_not_dates_stay_words(text: str) -> None:
    assert date_windows(text, TODAY) == ([], [])
    assert plan_query(text, [], TODAY).windows == []


def test_a_window_past_the_calendars_ends_is_left_out() -> None:
    assert date_windows("last year, 999 days ago", dt.date(1, 2, 1)) == ([], [])
    assert date_windows("999 months ago", TODAY)[0] == [("1944-10-12", "1944-12-20")]


def test_an_explicit_date_anchors_the_question_instead_of_today() -> None:
    windows, _ = date_windows("what did Maria do last weekend before April 10, 2023?", TODAY)
    assert windows == [("2023-04-09", "2023-04-18")]


def test_without_today_only_explicit_dates_resolve() -> None:
    assert date_windows("what did we cook yesterday?") == ([], [])
    assert date_windows("on 8 May, 2023")[0] == [("2023-05-07", "2023-05-16")]


def test_an_impossible_day_falls_back_to_its_month() -> None:
    assert date_windows("on 31 February, 2023", TODAY)[0] == [("2023-01-31", "2023-03-08")]


def test_plan_takes_the_date_words_out_of_the_search() -> None:
    plan = plan_query("What did Joanna cook last week?", ["Joanna"], TODAY)
    assert plan.text == "What did cook ?"
    assert plan.windows == [("2026-11-22", "2026-12-04")] and plan.speakers == ["Joanna"]


async def test_recall_prefers_the_turns_of_the_week_asked_about(memory: Memory) -> None:
    """The same words asked on two days find the risotto of the week before each."""
    await memory.add_memories(
        [
            {"text": "I cooked a mushroom risotto tonight.", "created_at": "2026-11-25T19:00:00Z"},
            {"text": "Cooked a pumpkin risotto for dinner.", "created_at": "2026-10-01T19:00:00Z"},
            *(
                {"text": text, "created_at": f"2026-{month}-10T08:00:00Z"}
                for month, text in (
                    ("09", "Went for a long run in the park."),
                    ("10", "Fixed the chain of my bike."),
                    ("11", "Bought new running shoes."),
                )
            ),
        ]
    )
    question = "what risotto did I cook last week?"
    in_december = await memory.recall(question, k=2, now=dt.datetime(2026, 12, 2, tzinfo=dt.UTC))
    in_october = await memory.recall(question, k=2, now=dt.datetime(2026, 10, 8, tzinfo=dt.UTC))
    assert "mushroom" in in_december[0].text
    assert "pumpkin" in in_october[0].text
