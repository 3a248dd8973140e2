"""bench/locomo.py counts recall per turn and per session as its docstring says."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # bench/ imports need the repo on sys.path first
sys.path.insert(0, str(ROOT))

from bench import locomo  # noqa: E402


def test_locomo_counts_turns_and_sessions() -> None:
    evidence = {"D1:3", "D4:2"}
    ids = ["D4:7", "D1:3", "D2:1"] + [f"D9:{i}" for i in range(20)]
    got = locomo.recall_at(evidence, ids)
    assert got[1] == 0.0 and got["s1"] == 0.5  # D4:7 is the right session, not the right turn
    assert got[5] == 0.5 and got["s5"] == 1.0
    assert got[10] == 0.5 and got["s10"] == 1.0


def test_locomo_holds_out_conversations_five_to_nine() -> None:
    assert locomo.TUNE == frozenset(range(5))
    assert locomo.parse_indexes("5-9") == {5, 6, 7, 8, 9}


def test_locomo_indexes_a_shared_photo_as_luna_indexes_a_described_image() -> None:
    conv = {
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {
                "speaker": "Mel",
                "dia_id": "D1:1",
                "text": "Look at this!",
                "img_url": ["https://example.org/pics/IMG_2130.jpg?w=640"],
                "blip_caption": "a photo of children playing on the beach with a kite",
            }
        ],
    }
    (turn,) = locomo.turns(conv, "t")
    assert turn["text"] == (
        "Mel: Look at this!\n[image IMG_2130.jpg: a photo of children playing on the beach "
        "with a kite]"
    )
