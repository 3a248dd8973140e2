"""The channel layer: what every chat app needs, under one adapter per app.

An adapter (``discord/``, ``telegram/``, ``matrix/``) only translates: its app's events become
:class:`~luna.frontends.channels.contract.InboundEvent` s handed to
:meth:`~luna.frontends.channels.channel.Channel.receive`, and the layer's calls (send, edit,
typing, approval prompts, where a scheduled result goes) become its app's calls, per the
:class:`~luna.frontends.channels.contract.ChannelAdapter` protocol. Everything else is here:

- ``contract``  the adapter protocol, the inbound event, the errors an adapter raises
- ``access``    who may talk (owner, allow-list, default deny, strangers), scopes, group rule
- ``pipeline``  replays dropped, bursts merged, one turn per session at a time
- ``channel``   admission and one turn: files, typing, approver, ``Agent.run_turn``
- ``stream``    the reply streamed by editing, the status line, the final split
- ``sending``   rate limits waited out (``retry_after``), too-long messages halved
- ``split``     long replies cut at the app's limit with code fences kept balanced
- ``approval``  owner approvals: the prompt, who counts, the timeout
- ``files``     files as uploads for the attachments intake (caps, failed downloads)
- ``download``  a file fetched over HTTP, never past a cap (the adapters' readers)
- ``delivery``  scheduled results sent to where they were asked for
- ``cursor``    an app's read position and its acknowledged, unanswered turns, in the database
- ``following`` the threads Luna follows (answered in), from the session log
"""
