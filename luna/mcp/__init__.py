"""MCP tool servers: the servers file, one server connection, the manager, the ``mcp`` CLI.

May import ``tools`` (to register into the registry), ``config``, ``messages``, ``errors`` and
``observe``; never the agent or a front-end.
"""
