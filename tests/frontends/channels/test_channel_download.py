"""An app's download client over real HTTP (a loopback file host): one client for every
download, its connection reused, built off the event loop, closed once the app stops, and a
file past the cap cut one byte after it; a file on this machine read the same way."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from luna.frontends.channels import download
from luna.frontends.channels.contract import ChannelError
from luna.frontends.channels.download import Downloads, fetch_capped, read_local_capped
from tests.fakes.file_host import FileHost


async def test_downloads_reuse_one_client_and_connection_until_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built_on: list[str] = []
    real_new_client = download.new_client

    def counting_new_client() -> download.httpx.AsyncClient:
        built_on.append(threading.current_thread().name)
        return real_new_client()

    monkeypatch.setattr(download, "new_client", counting_new_client)
    host = await FileHost().start()
    try:
        one = host.add("one.txt", b"first file")
        two = host.add("two.txt", b"second file")
        big = host.add_endless("big.bin", 50_000_000)
        downloads = Downloads()
        assert await fetch_capped(await downloads.client(), one, 1000) == b"first file"
        assert await fetch_capped(await downloads.client(), two, 1000) == b"second file"
        assert len(await fetch_capped(await downloads.client(), big, 10_000)) == 10_001
        client = await downloads.client()
        assert len(built_on) == 1 and built_on[0] != threading.main_thread().name  # off the loop
        assert host.peers[0] == host.peers[1]  # the second file came on the first connection
        assert host.files["big.bin"].sent < 20_000_000  # stopped (socket buffers hold a few MB)

        await downloads.aclose()
        assert client.is_closed and downloads.is_closed
        with pytest.raises(ChannelError):
            await downloads.client()  # stopped: no download starts
        await downloads.aclose()  # twice is fine
    finally:
        await host.stop()


async def test_downloads_closed_before_any_download_builds_no_client() -> None:
    downloads = Downloads()
    await downloads.aclose()
    with pytest.raises(ChannelError):
        await downloads.client()


async def test_read_local_capped_stops_past_the_cap_and_translates_errors(
    tmp_path: Path,
) -> None:
    big = tmp_path / "big.log"
    big.write_bytes(b"A" * 100_000)
    assert len(await read_local_capped(big, 10_000)) == 10_001
    assert await read_local_capped(big, 200_000) == b"A" * 100_000
    with pytest.raises(ChannelError, match=r"^reading the file failed \(FileNotFoundError\)$"):
        await read_local_capped(tmp_path / "gone.txt", 10)
