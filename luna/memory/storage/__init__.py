"""The SQLite file and everything that reads or writes it directly.

Schema and migrations, the session log, the write gate and held messages, memories (facts),
session heads, the request log, the vectors' in-RAM copy, health checks, backups, restore and
salvage. Imports no other part of luna.memory (embedding, recall, the librarian, the facade):
they stand on it.

The request log lives here rather than in luna.observe or luna.llm. It is an SQLite file of its
own (requests.db beside the database) opened through the same connection rules (storage.db:
the pysqlite3 build, WAL, busy waits), and the data folder counts it among its signs of use.
luna.observe sits below memory and must not open databases; luna.llm must not know where
anything is stored (the agent loop hands each request body to the log, doctor reads it).
"""
