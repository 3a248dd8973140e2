"""Files sent through the REPL reach the real llama-server with a vision projector
(tests/real_llama.py, ``vision=True``): the photo goes as an image part, downscaled and
re-encoded, the same bytes in the next turn's request; a PDF's text rides in the message."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Callable
from pathlib import Path

from PIL import Image

from luna.memory.storage.request_log import RequestLog
from tests.fakes.attachments import pdf, photo
from tests.frontends.test_repl import start_repl
from tests.real_llama import ALIAS, RealLlama

IMAGE_DECODED = re.compile(r"image decoded \(batch 1/1\)")


def test_repl_attach_reaches_the_real_vision_server_and_stays_cached(
    tmp_path: Path, real_llama: Callable[..., RealLlama]
) -> None:
    real = real_llama("luna", fresh_server=True, vision=True)
    (tmp_path / "config.toml").write_text(
        f'[llm]\nmodel = "{ALIAS}"\nmax_tokens = 24\ntemperature = 0.0\n'
        "[memory]\nlibrarian = false\n"
    )
    (tmp_path / "street.jpg").write_bytes(photo(2400, 1800))
    (tmp_path / "receipt.pdf").write_bytes(pdf(["Bakery 4.10 EUR"]))
    proc = start_repl(tmp_path, real.url)
    out, err = proc.communicate(
        "/attach street.jpg\n/attach receipt.pdf\nwhat do you see?\nand the total?\n",
        timeout=600,
    )
    assert proc.returncode == 0, err
    assert "error:" not in out and "cannot see images" not in out, out
    session = (tmp_path / "data" / "repl_session").read_text().strip()
    chat = RequestLog(tmp_path / "data" / "requests.db").for_session(session)
    assert len(chat) == 2 and not any(r.error for r in chat)
    first, second = (r.messages for r in chat)
    sent = [p for p in first[-1]["content"] if p["type"] == "image_url"]
    assert len(sent) == 1
    text = "".join(p.get("text", "") for p in first[-1]["content"] if p["type"] == "text")
    assert "what do you see?" in text and "Bakery 4.10 EUR" in text  # the PDF's text layer
    data = base64.b64decode(sent[0]["image_url"]["url"].split(",", 1)[1])
    with Image.open(io.BytesIO(data)) as image:
        assert (image.format, image.size) == ("JPEG", (1024, 768))  # downscaled, re-encoded
    again = [p for m in second for p in m["content"] if isinstance(m["content"], list)]
    assert sent[0] in again  # turn 2 repeats the photo byte for byte
    assert chat[1].cached_tokens and chat[1].cached_tokens > 0
    decoded = IMAGE_DECODED.findall(Path(real.log_path).read_text(errors="replace"))
    print(
        f"image decoded {len(decoded)} times; turn 2 cached {chat[1].cached_tokens} of "
        f"{chat[1].prompt_tokens} prompt tokens"
    )
