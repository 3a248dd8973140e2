"""How MCP results and resource contents reach the model: text, decoded text blobs, media."""

from __future__ import annotations

import base64

import mcp_types as types

from luna.mcp.content import as_text, result_of_call, result_of_read
from luna.messages import ToolMedia

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _wire(result: types.CallToolResult) -> dict:
    """The JSON object a server sends for ``result`` (the SDK's own spelling of the wire)."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_result_of_call_joins_text_and_keeps_images_as_bytes_beside_it() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="caption"),
            types.ImageContent(type="image", data=_b64(PNG), mime_type="image/png"),
            types.TextContent(type="text", text="after"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="file:///a.txt", text="inside"),
            ),
        ]
    )
    shown = result_of_call(_wire(result), "echo")
    # What a text-only model reads is today's line; the bytes travel in media.
    assert (
        shown.content == "caption\n[image/png, 70 bytes]\nafter\n[resource file:///a.txt]\ninside"
    )
    assert shown.media == (ToolMedia("image", "image/png", PNG),)
    assert result_of_call(_wire(types.CallToolResult(content=[])), "echo").content == "(no output)"


def test_result_of_call_decodes_text_blobs_and_describes_binary_ones() -> None:
    def blob(data: bytes, mime: str | None) -> types.EmbeddedResource:
        contents = types.BlobResourceContents(uri="demo://x", blob=_b64(data), mime_type=mime)
        return types.EmbeddedResource(type="resource", resource=contents)

    result = types.CallToolResult(
        content=[
            blob(b"Hello, blob!", "text/plain"),
            blob(b'{"a": 1}', "application/vnd.api+json"),
            blob("d\u00e9j\u00e0 vu".encode(), None),  # no type, but UTF-8 text
            blob(b"\x1f\x8b\x08\x00binary", "application/gzip"),
            blob(b"\x00\x01\x02", "application/octet-stream"),
        ]
    )
    assert result_of_call(_wire(result), "ev").content.split("\n") == [
        "[resource demo://x, text/plain]",
        "Hello, blob!",
        "[resource demo://x, application/vnd.api+json]",
        '{"a": 1}',
        "[resource demo://x, text]",
        "d\u00e9j\u00e0 vu",
        "[resource demo://x, application/gzip, 10 bytes]",
        "[resource demo://x, application/octet-stream, 3 bytes]",
    ]


def test_result_of_call_tells_how_to_read_a_resource_link() -> None:
    link = types.ResourceLink(
        type="resource_link", uri="demo://resource/1", name="One", mime_type="text/plain"
    )
    shown = result_of_call(_wire(types.CallToolResult(content=[link])), "everything")
    assert shown.content == (
        "[resource link: One demo://resource/1, text/plain; read it with "
        "mcp_read_resource(server='everything', uri='demo://resource/1')]"
    )


def test_result_of_read_shows_each_content_like_an_embedded_resource() -> None:
    read = {
        "contents": [
            {"uri": "demo://t", "mimeType": "text/plain", "text": "plain"},
            {"uri": "demo://b", "mimeType": "text/markdown", "blob": _b64(b"# title")},
            {"uri": "demo://i", "mimeType": "image/png", "blob": _b64(PNG)},
        ]
    }
    shown = result_of_read(read, "ev")
    assert shown.content == (
        "[resource demo://t]\nplain\n[resource demo://b, text/markdown]\n# title\n"
        "[resource demo://i, image/png, 70 bytes]"
    )
    # An image resource reaches a model that can see as an image, like image content.
    assert shown.media == (ToolMedia("image", "image/png", PNG),)
    assert result_of_read({}, "ev").content == "(the resource is empty)"
    svg = {"uri": "demo://s", "mimeType": "image/svg+xml", "blob": _b64(b"<svg/>")}
    drawn = result_of_read({"contents": [svg]}, "ev")
    assert drawn.content == "[resource demo://s, image/svg+xml]\n<svg/>" and drawn.media == ()


def test_as_text_decodes_only_what_is_text() -> None:
    assert as_text(b"a\nb", "text/csv; charset=utf-8") == "a\nb"
    assert as_text(b"\xff\xfe", "") is None
    assert as_text(b"ok", "image/png") is None


def test_result_of_call_reads_a_hostile_result_without_failing() -> None:
    odd = {
        "content": [
            "not an object",
            {"type": "text", "text": {"nested": 1}},
            {"type": "image", "data": 5},
            {"type": "image", "data": "not base64!", "mimeType": "image/png"},
            {"type": "resource", "resource": "x"},
            {"type": 7},
        ]
    }
    shown = result_of_call(odd, "ev")
    assert shown.content == (
        "[unreadable content]\n\n[image, 0 bytes]\n[image/png, unreadable data]\n"
        "[resource , application/octet-stream, 0 bytes]\n[unknown content]"
    )
    assert shown.media == ()
    assert result_of_call({"content": "text"}, "ev").content == "(no output)"
    assert result_of_call({"structuredContent": {"a": 1}}, "ev").content == '{"a": 1}'
