"""Telegram as a channel adapter: the layer's calls as Bot API calls.

Job: :class:`TelegramAdapter` keeps the
:class:`~luna.frontends.channels.contract.ChannelAdapter` contract over a
``telegram.Bot``: a conversation is a :class:`~luna.frontends.telegram.conversation.Chat`.

Invariants:
- Text goes out as HTML rendered from the Markdown (``render``), everything in it escaped.
  Should Telegram still refuse it (400), it is sent again as plain text, so no model output
  can lose a message; a text over 4,096 UTF-16 code units raises ``TooLongError`` before any
  call (the layer halves it), and so does a long one Telegram refuses even as plain text
  (its own count said too long: the Bot API says which 400 it is only in words).
- An edit to the very text a message already shows is not sent (Telegram refuses those).
- Files are downloaded through the adapter's one client (``downloads``, closed by
  :meth:`TelegramAdapter.aclose` when the front-end stops).
- An approval prompt carries an inline keyboard (``luna:yes`` / ``luna:no``); a cut JSON
  preview is followed by the whole text as a document. The answers come back as callback
  queries, handed to the layer by the front-end.
"""

from __future__ import annotations

import io
import logging
from typing import Any

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions
from telegram.constants import ChatAction, ParseMode

from luna.frontends.channels.contract import ApprovalRequest, Destination, Sent, TooLongError
from luna.frontends.channels.download import Downloads
from luna.frontends.telegram.calls import RefusedError, call
from luna.frontends.telegram.conversation import Chat
from luna.frontends.telegram.render import Rendered, plain, render, utf16_length
from luna.messages import Frontend
from luna.observe import log_event

log = logging.getLogger(__name__)

TELEGRAM_LIMIT = 4096
TYPING_EVERY = 4.5  # Telegram shows "typing" for 5 s per action
YES, NO = "luna:yes", "luna:no"
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)


def _html_of(text: str) -> Rendered:
    rendered = render(text)
    if rendered.length > TELEGRAM_LIMIT:
        raise TooLongError(f"{rendered.length} UTF-16 code units > {TELEGRAM_LIMIT}")
    return rendered if rendered.text.strip() else plain(text)


class TelegramAdapter:
    """The channel layer's calls on Telegram."""

    name: Frontend = "telegram"
    limit = TELEGRAM_LIMIT
    typing_every = TYPING_EVERY
    status_prefix = ""

    def __init__(self, bot: Bot, *, edit_interval: float) -> None:
        self.bot = bot
        self.edit_interval = edit_interval
        self.downloads = Downloads()  # files' client, closed by aclose

    async def aclose(self) -> None:
        await self.downloads.aclose()

    async def _send(self, chat: Chat, rendered: Rendered, markup: Any = None) -> Any:
        mode = ParseMode.HTML if rendered.is_html else None
        return await call(
            self.bot.send_message(
                chat.chat_id,
                rendered.html,
                parse_mode=mode,
                message_thread_id=chat.thread_id,
                reply_markup=markup,
                link_preview_options=NO_PREVIEW,
            )
        )

    async def send(self, conversation: Any, text: str) -> Sent:
        chat: Chat = conversation
        rendered = _html_of(text)
        try:
            message = await self._send(chat, rendered)
        except RefusedError:
            if not rendered.is_html:
                raise
            log_event("telegram_plain_fallback", op="send")
            if utf16_length(text) > TELEGRAM_LIMIT:
                raise TooLongError("the plain text is too long") from None
            rendered = plain(text)
            try:
                message = await self._send(chat, rendered)
            except RefusedError as e:
                if utf16_length(text) > TELEGRAM_LIMIT // 2:  # a long text: take it as too
                    raise TooLongError(str(e)) from e  # long (the layer halves it)
                raise
        return Sent(chat, str(message.message_id), rendered.html)

    async def _edit(self, sent: Sent, rendered: Rendered) -> None:
        chat: Chat = sent.conversation
        mode = ParseMode.HTML if rendered.is_html else None
        await call(
            self.bot.edit_message_text(
                rendered.html,
                chat_id=chat.chat_id,
                message_id=int(sent.message_id),
                parse_mode=mode,
                link_preview_options=NO_PREVIEW,
            )
        )

    async def edit(self, sent: Sent, text: str) -> Sent:
        rendered = _html_of(text)
        if rendered.html == sent.native:
            return sent
        try:
            await self._edit(sent, rendered)
        except RefusedError:
            if not rendered.is_html or utf16_length(text) > TELEGRAM_LIMIT:
                raise
            log_event("telegram_plain_fallback", op="edit")
            rendered = plain(text)
            try:
                await self._edit(sent, rendered)
            except RefusedError as e:
                if utf16_length(text) > TELEGRAM_LIMIT // 2:
                    raise TooLongError(str(e)) from e
                raise
        return Sent(sent.conversation, sent.message_id, rendered.html)

    async def delete(self, sent: Sent) -> None:
        chat: Chat = sent.conversation
        await call(self.bot.delete_message(chat.chat_id, int(sent.message_id)))

    async def typing(self, conversation: Any) -> None:
        chat: Chat = conversation
        await call(
            self.bot.send_chat_action(
                chat.chat_id, ChatAction.TYPING, message_thread_id=chat.thread_id
            )
        )

    async def post_approval(self, conversation: Any, request: ApprovalRequest) -> Sent:
        chat: Chat = conversation
        text = (
            f"🔐 May I run `{request.tool}`?\n```json\n{request.preview}\n```\n"
            + ("The whole text follows as a file.\n" if request.is_cut else "")
            + f"Only the owner can answer (denied after {request.timeout:g}s)."
        )
        keyboard = InlineKeyboardMarkup(
            [[InlineKeyboardButton("✅ Allow", callback_data=YES),
              InlineKeyboardButton("❌ Deny", callback_data=NO)]]
        )  # fmt: skip
        rendered = _html_of(text)
        message = await self._send(chat, rendered, keyboard)
        if request.is_cut:
            document = io.BytesIO(request.full.encode())
            await call(
                self.bot.send_document(
                    chat.chat_id,
                    document,
                    filename=f"{request.tool}.txt",
                    message_thread_id=chat.thread_id,
                )
            )
        return Sent(chat, str(message.message_id), rendered.html)

    async def offer_choices(self, prompt: Sent) -> None:
        return None  # the keyboard came with the prompt

    async def destination(self, address: dict[str, Any]) -> Destination | None:
        chat = Chat.from_address(address)
        if chat is None:
            log.warning("telegram: a scheduled delivery has a bad address %r", address)
        return Destination(chat) if chat is not None else None
