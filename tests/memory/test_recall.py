"""Hybrid recall: paraphrases across sessions, hostile queries, scopes, supersede, budget."""

from __future__ import annotations

import pytest

from luna.memory import Memory, RecallItem, format_recall
from luna.memory.recall.query import build_fts_query, plan_query
from luna.memory.storage import db

HOSTILE = [
    "",
    "   ",
    '"',
    '""',
    "'",
    "AND",
    "OR NOT AND",
    "NOT bicycle",
    "bicycle AND",
    "NEAR(bicycle green, 2)",
    "bicycle*",
    "*",
    "?",
    "bicycle?",
    "^bicycle",
    "col:bicycle",
    "(bicycle",
    "bicycle)",
    "{bicycle}",
    "bicycle -green +gazelle",
    "'; DROP TABLE messages; --",
    'a "quoted \\" bicycle',
    "ünïcödé bicycle 🚲 自転車",
    "bi\x00cycle",
    "x" * 5000,
    " ".join(["bicycle"] * 300),
    "the of and",
    "...!!!,,,;;;",
    "bicycle on 1 January, 0001",  # dates whose windows would leave the calendar
    "bicycle 9999-12-31 yesterday",
    "bicycle in December 9999",
    "bicycle 999 months ago, last Friday, in May",
]


async def test_recall_finds_paraphrase_from_another_session(memory: Memory) -> None:
    await memory.append_message(
        "monday",
        {"role": "user", "content": "I adopted a greyhound puppy last week, we named her Biscuit."},
    )
    await memory.append_message("monday", {"role": "assistant", "content": "Congratulations!"})
    await memory.append_message("monday", {"role": "user", "content": "Also my car broke down."})
    await memory.flush_index()
    hits = await memory.recall("what is the name of my dog?", session_id="friday", k=3)
    assert hits, "recall returned nothing"
    assert "Biscuit" in hits[0].text
    assert hits[0].kind == "message" and hits[0].source == "user"
    assert hits[0].created_at[:4].isdigit()


@pytest.mark.parametrize("query", HOSTILE)
async def test_recall_survives_hostile_query(memory: Memory, query: str) -> None:
    await memory.add_memory("My bicycle is a green Gazelle.")
    match = build_fts_query(query)
    if match is not None:  # the generated expression is always valid FTS5
        memory.store.query("SELECT rowid FROM docs_fts WHERE docs_fts MATCH ?", (match,))
    hits = await memory.recall(query, k=3)
    assert isinstance(hits, list)
    if "bicycle" in query.lower() and "bi\x00cycle" not in query:
        assert hits and "Gazelle" in hits[0].text, f"nothing found for {query!r}"


def test_fts_query_quotes_operators_and_drops_stopwords() -> None:
    assert build_fts_query("NOT the bicycle AND OR") == '"bicycle"'
    assert build_fts_query("the of and") == '"the" OR "of" OR "and"'  # only stopwords: keep
    assert build_fts_query('say "hi"*?') == '"say" OR "hi"'
    assert build_fts_query("?!") is None


def test_query_plan_extracts_dates_and_speakers() -> None:
    plan = plan_query("What did Joanna watch on 1 May, 2022?", ["Joanna", "Nate"])
    assert plan.speakers == ["Joanna"]
    assert plan.windows == [("2022-04-30", "2022-05-09")]
    assert "Joanna" not in plan.text and "2022" not in plan.text
    assert plan_query("in mid-August 2023", []).windows == [("2023-07-31", "2023-09-08")]
    assert plan_query("Joanna", ["Joanna"]).text == "Joanna"  # never an empty search


async def test_recall_scope_isolation(memory: Memory) -> None:
    await memory.add_memory("The owner's safe code is 4711.", scope="owner")
    await memory.add_memory("Bob's safe code is 1234.", scope="user:42")
    await memory.append_message(
        "d1", {"role": "user", "content": "my safe code is 9999"}, scope="user:42"
    )
    await memory.flush_index()
    bob = " | ".join(h.text for h in await memory.recall("safe code", scope="user:42", k=10))
    assert "1234" in bob and "9999" in bob  # their memory and their message are found...
    assert "4711" not in bob  # ...and nothing of the owner's
    owner = " | ".join(h.text for h in await memory.recall("safe code", scope="owner", k=10))
    assert "4711" in owner
    assert "1234" not in owner and "9999" not in owner
    assert await memory.recall("safe code", scope="user:7", k=10) == []


async def test_superseded_fact_ranks_below_replacement(memory: Memory) -> None:
    old = await memory.add_memory("We live in Porto, Portugal.", importance=8)
    new = await memory.add_memory("We moved to Lisbon.", importance=5)
    await memory.supersede(old, new)
    hits = await memory.recall("where do we live in Porto", k=5)
    ids = [h.id for h in hits if h.kind == "memory"]
    assert new in ids and old in ids
    assert ids.index(new) < ids.index(old)
    old_item = next(h for h in hits if h.id == old)
    assert old_item.superseded_by == new
    assert "superseded" in format_recall(hits, 500)


async def test_recency_and_importance_do_not_outweigh_relevance(memory: Memory) -> None:
    relevant = await memory.add_memory(
        "My passport number ends in 0815.", importance=1, created_at="2019-01-01T00:00:00+00:00"
    )
    for i in range(5):
        await memory.add_memory(f"Shopping list item {i}: milk and bread.", importance=10)
    hits = await memory.recall("passport number", k=3)
    assert hits[0].id == relevant


async def test_recall_by_date_window(memory: Memory) -> None:
    await memory.add_memory("Went hiking in the Alps.", created_at="2023-05-08T10:00:00+00:00")
    await memory.add_memory("Went hiking in the Andes.", created_at="2024-02-01T10:00:00+00:00")
    hits = await memory.recall("Where did I go hiking on 7 May 2023?", k=2)
    assert "Alps" in hits[0].text


async def test_forget_removes_memory_from_recall(memory: Memory) -> None:
    mem_id = await memory.add_memory("The wifi password is hunter2.")
    assert (await memory.recall("wifi password", k=3))[0].id == mem_id
    assert await memory.forget(mem_id) is True
    assert await memory.forget(mem_id) is False
    assert all(h.id != mem_id for h in await memory.recall("wifi password", k=3))
    assert await memory.list_memories() == []


async def test_recall_skips_messages_already_in_the_prompt(memory: Memory) -> None:
    await memory.append_message("s", {"role": "user", "content": "the tomato plants need water"})
    await memory.flush_index()
    assert await memory.recall("tomato plants", session_id="s") == []
    other = await memory.recall("tomato plants", session_id="other")
    assert other and "tomato" in other[0].text


def test_format_recall_respects_budget_and_shows_date_and_source() -> None:
    items = [
        RecallItem(
            "memory",
            i,
            f"fact number {i} " + "x" * 300,
            f"2024-03-0{i + 1}T10:00:00",
            "user",
            1.0 - i / 10,
        )
        for i in range(5)
    ]
    text = format_recall(items, 100)
    assert len(text) <= 100 * 4
    assert text.startswith("- [2024-03-01, user memory #0] fact number 0")
    assert format_recall(items, 0) == ""
    assert format_recall([], 1000) == ""


def test_db_features_report_fts5_and_sqlite_vec() -> None:
    f = db.check_features()
    assert f.fts5, f.fts5_error
    assert f.vector_enabled and f.sqlite_vec, f.sqlite_vec_error


async def test_fts_only_mode_is_reported_and_still_recalls(
    memory_config, caplog: pytest.LogCaptureFixture
) -> None:
    mem = Memory(memory_config())
    with caplog.at_level("WARNING"):
        await mem.open(use_vectors=False)
    try:
        assert mem.vector_enabled is False
        assert mem.vector_error  # says why (doctor and the start-up warning show it)
        assert any("FTS-only" in r.getMessage() for r in caplog.records)
        await mem.append_message("s", {"role": "user", "content": "the spare key is under the mat"})
        await mem.add_memory("The plumber is called Ana.")
        assert await mem.flush_index() == 0
        hits = await mem.recall("where is the spare key", session_id="other")
        assert hits and "mat" in hits[0].text
        assert (await mem.recall("plumber"))[0].text == "The plumber is called Ana."
    finally:
        await mem.close()
    # Opened again with vectors, the backlog is embedded and semantic recall works.
    mem = Memory(memory_config())
    await mem.open(background=False)
    try:
        assert await mem.flush_index() == 2
        hits = await mem.recall("who fixes my pipes?", k=1)
        assert "Ana" in hits[0].text
    finally:
        await mem.close()


FEEDBACK_DOCS = [
    "Maria plays the violin in the city orchestra.",
    "Her bow needs new horsehair before the concert season.",
    "Which band is playing at the festival this summer?",
    "We played board games all night with the neighbours.",
    "The kids play football in the park on Saturdays.",
    "What does Tom do for a living?",
    "The dentist appointment is on Tuesday.",
    "I bought new running shoes yesterday.",
    "Does anyone know what to play at the party?",
    "The piano tuner is coming next week to our house.",
]


async def test_feedback_pulls_in_doc_related_to_best_hit(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rocchio feedback: the bow/horsehair line shares no word and little meaning with the
    question, but it is close to the best hit (the violin), so it beats a wordier distractor."""
    from luna.memory.recall import search

    await memory.add_memories([{"text": t} for t in FEEDBACK_DOCS])
    question = "What instrument does Maria play?"
    with_feedback = [h.text for h in await memory.recall(question, k=2)]
    assert with_feedback == FEEDBACK_DOCS[:2], with_feedback
    monkeypatch.setattr(search, "PRF_BETA", 0.0)
    plain = [h.text for h in await memory.recall(question, k=2)]
    assert plain[0] == FEEDBACK_DOCS[0]
    assert FEEDBACK_DOCS[1] not in plain, "plain query finds it: test proves nothing"


async def test_common_words_leave_large_indexes_fts_but_rare_ones_stay(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from luna.memory.recall import search

    texts = [f"we go out on day {i}" for i in range(30)] + ["we went hiking in the Tatra"]
    await memory.add_memories([{"text": t} for t in texts])
    words = ["go", "hiking", "tatras"]
    assert search.distinctive_terms(memory.store, words) == words  # a small index: exact FTS
    monkeypatch.setattr(search, "COMMON_MIN_DOCS", 1)
    # "go" is in 30 of 31 docs; "hiking" is counted as the index stems it (hike).
    assert search.distinctive_terms(memory.store, words) == ["hiking", "tatras"]
    assert search.distinctive_terms(memory.store, ["go", "out"]) in (["go"], ["out"])
    hits = await memory.recall("did we go hiking?", k=3)
    assert "Tatra" in hits[0].text


async def test_fts_keeps_a_small_scope_complete_beside_a_large_one(memory: Memory) -> None:
    await memory.add_memories([{"text": f"the tulip bed number {i}"} for i in range(400)])
    mine = [f"my tulip {c} is blooming" for c in ("red", "white", "yellow")]
    await memory.add_memories([{"text": t, "scope": "user:9"} for t in mine])
    hits = await memory.recall("tulip", scope="user:9", k=10)
    assert sorted(h.text for h in hits) == sorted(mine)


async def test_recall_embeds_the_words_its_plan_searches(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vector is asked for before the scope's speakers are read (from those seen last);
    when a speaker the cache did not know changes the words, they are embedded again."""
    await memory.add_memory("Caroline went to the support group.", speaker="Caroline")
    memory.store._speakers.clear()  # as after a restart: no speaker seen yet
    embedded: list[str] = []
    real = memory.embed_query

    async def recording(text: str) -> bytes | None:
        embedded.append(text)
        return await real(text)

    monkeypatch.setattr(memory, "embed_query", recording)
    hits = await memory.recall("When did Caroline go to the group?", k=2)
    assert embedded[-1] == "When did go to the group?", embedded  # the plan's words
    assert hits and "support group" in hits[0].text
    embedded.clear()
    await memory.recall("What did Caroline say?", k=2)  # the speaker is known now: one embed
    assert embedded == ["What did say?"]


EPISODE = [  # one sitting: the answer shares no word with the question, its neighbour does
    ("s1", "Nate: I made coconut milk ice cream for the first time yesterday!"),
    ("s1", "Joanna: Ooh, how did it turn out?"),
    ("s1", "Nate: Honestly? Super good, rich and creamy. My new favourite snack."),
    ("s2", "Nate: I think ice cream from the shop is fine, nothing special."),
    ("s3", "Joanna: What do you think about a trip to the coast?"),
]


async def test_an_episode_lifts_the_answer_beside_the_best_match(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply ("Super good, rich and creamy") is lifted by the turn it answers, which holds
    the question's words, above a turn of another sitting that shares more of them."""
    from luna.memory.recall import fusion

    await memory.add_memories(
        [
            {"text": t, "session_id": s, "source": "import", "speaker": t.split(":")[0]}
            for s, t in EPISODE
        ]
    )
    question = "What did Nate think of the coconut milk ice cream he made?"
    ranked = [h.text for h in await memory.recall(question, k=5)]
    assert ranked.index(EPISODE[2][1]) < ranked.index(EPISODE[3][1]), ranked
    monkeypatch.setattr(fusion, "EPISODE_BOOST", 0.0)
    plain = [h.text for h in await memory.recall(question, k=5)]
    assert plain.index(EPISODE[3][1]) < plain.index(EPISODE[2][1]), "test proves nothing"
