"""The memory database's schema history: ordered, named, forward-only migrations.

Invariants: each entry runs once, in its own transaction, in list order, and is recorded in
``_migrations``; a released entry is never edited — a change appends a new one.
"""

from __future__ import annotations

Migration = tuple[str, list[str]]

MIGRATIONS: list[Migration] = [
    (
        "m001_session_log",
        [
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                scope TEXT NOT NULL DEFAULT 'owner',
                created_at TEXT NOT NULL
            )""",
            """CREATE TABLE messages (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL REFERENCES sessions(id),
                role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
                content TEXT NOT NULL DEFAULT '',
                tool_calls TEXT,
                tool_call_id TEXT,
                name TEXT,
                context TEXT,
                scope TEXT NOT NULL DEFAULT 'owner',
                created_at TEXT NOT NULL,
                prompt_tokens INTEGER,
                completion_tokens INTEGER,
                total_tokens INTEGER,
                cached_tokens INTEGER
            )""",
            "CREATE INDEX messages_session ON messages(session_id, id)",
            """CREATE TRIGGER messages_append_only_update BEFORE UPDATE ON messages
               BEGIN SELECT RAISE(ABORT, 'messages are append-only'); END""",
            """CREATE TRIGGER messages_append_only_delete BEFORE DELETE ON messages
               BEGIN SELECT RAISE(ABORT, 'messages are append-only'); END""",
        ],
    ),
    (
        "m002_memory_index",
        [
            """CREATE TABLE memories (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                text TEXT NOT NULL,
                importance INTEGER NOT NULL DEFAULT 5 CHECK (importance BETWEEN 1 AND 10),
                source TEXT NOT NULL DEFAULT 'user'
                    CHECK (source IN ('user', 'assistant', 'tool', 'import')),
                speaker TEXT,
                scope TEXT NOT NULL DEFAULT 'owner',
                session_id TEXT,
                external_id TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                superseded_by INTEGER REFERENCES memories(id) ON DELETE SET NULL
            )""",
            """CREATE UNIQUE INDEX memories_external ON memories(scope, external_id)
               WHERE external_id IS NOT NULL""",
            "CREATE INDEX memories_scope ON memories(scope, id)",
            """CREATE TABLE summaries (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id TEXT NOT NULL UNIQUE REFERENCES sessions(id),
                text TEXT NOT NULL,
                cut_message_id INTEGER NOT NULL,
                compactions INTEGER NOT NULL DEFAULT 1,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            """CREATE TABLE docs (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                kind TEXT NOT NULL CHECK (kind IN ('message', 'memory', 'summary')),
                ref_id INTEGER NOT NULL,
                scope TEXT NOT NULL,
                created_at TEXT NOT NULL,
                thread TEXT,
                speaker TEXT,
                embedded INTEGER NOT NULL DEFAULT 0,
                UNIQUE (kind, ref_id)
            )""",
            "CREATE INDEX docs_pending ON docs(embedded) WHERE embedded = 0",
            "CREATE INDEX docs_thread ON docs(thread, kind, id) WHERE thread IS NOT NULL",
            "CREATE INDEX docs_scope_time ON docs(scope, created_at)",
            "CREATE INDEX docs_speaker ON docs(scope, speaker) WHERE speaker IS NOT NULL",
            # text = the searchable text; ctx = its neighbours in the same thread (a message's
            # previous and next message), weighted lower by bm25.
            """CREATE VIRTUAL TABLE docs_fts USING fts5(
                text, ctx, tokenize = 'porter unicode61'
            )""",
            # Index what an older database already holds.
            """INSERT INTO docs (kind, ref_id, scope, created_at, thread)
               SELECT 'message', id, scope, created_at, session_id FROM messages
               WHERE role IN ('user', 'assistant') AND content != '' ORDER BY id""",
            """INSERT INTO docs_fts (rowid, text, ctx)
               SELECT d.id, m.content, '' FROM docs d JOIN messages m
               ON d.kind = 'message' AND d.ref_id = m.id""",
        ],
    ),
    (
        "m003_thread_vectors",
        [
            # A threaded doc's own embedding; docs_vec holds it mixed with its neighbours'.
            """CREATE TABLE doc_raw_vec (
                doc_id INTEGER PRIMARY KEY REFERENCES docs(id) ON DELETE CASCADE,
                embedding BLOB NOT NULL
            )""",
            # Vectors written before this migration were not mixed: embed them again.
            "UPDATE docs SET embedded = 0 WHERE thread IS NOT NULL",
        ],
    ),
    (
        "m004_context_set_once",
        [
            # The user's message is logged before recall runs; its per-turn context (time,
            # recalled memories) is attached once afterwards. Nothing else may ever change.
            "DROP TRIGGER messages_append_only_update",
            """CREATE TRIGGER messages_append_only_update BEFORE UPDATE ON messages
               WHEN NOT (OLD.context IS NULL AND NEW.context IS NOT NULL
                        AND NEW.id IS OLD.id
                        AND NEW.session_id IS OLD.session_id
                        AND NEW.role IS OLD.role
                        AND NEW.content IS OLD.content
                        AND NEW.tool_calls IS OLD.tool_calls
                        AND NEW.tool_call_id IS OLD.tool_call_id
                        AND NEW.name IS OLD.name
                        AND NEW.scope IS OLD.scope
                        AND NEW.created_at IS OLD.created_at
                        AND NEW.prompt_tokens IS OLD.prompt_tokens
                        AND NEW.completion_tokens IS OLD.completion_tokens
                        AND NEW.total_tokens IS OLD.total_tokens
                        AND NEW.cached_tokens IS OLD.cached_tokens)
               BEGIN SELECT RAISE(ABORT, 'messages are append-only'); END""",
        ],
    ),
    (
        "m005_reasoning",
        [
            # The model's reasoning for each assistant message, replayed exactly as generated
            # so each request extends the tokens the server already holds in its KV cache.
            "ALTER TABLE messages ADD COLUMN reasoning TEXT",
            "DROP TRIGGER messages_append_only_update",
            """CREATE TRIGGER messages_append_only_update BEFORE UPDATE ON messages
               WHEN NOT (OLD.context IS NULL AND NEW.context IS NOT NULL
                        AND NEW.id IS OLD.id
                        AND NEW.session_id IS OLD.session_id
                        AND NEW.role IS OLD.role
                        AND NEW.content IS OLD.content
                        AND NEW.tool_calls IS OLD.tool_calls
                        AND NEW.tool_call_id IS OLD.tool_call_id
                        AND NEW.name IS OLD.name
                        AND NEW.scope IS OLD.scope
                        AND NEW.created_at IS OLD.created_at
                        AND NEW.prompt_tokens IS OLD.prompt_tokens
                        AND NEW.completion_tokens IS OLD.completion_tokens
                        AND NEW.total_tokens IS OLD.total_tokens
                        AND NEW.cached_tokens IS OLD.cached_tokens
                        AND NEW.reasoning IS OLD.reasoning)
               BEGIN SELECT RAISE(ABORT, 'messages are append-only'); END""",
        ],
    ),
    (
        "m006_scheduler",
        [
            # Reminders, recurring prompts and the heartbeat (luna.scheduler). Times are UTC
            # ISO 8601 text with milliseconds, so text order is time order.
            """CREATE TABLE scheduled_tasks (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                kind TEXT NOT NULL CHECK (kind IN ('reminder', 'prompt', 'heartbeat')),
                text TEXT NOT NULL,
                schedule_kind TEXT NOT NULL CHECK (schedule_kind IN ('once', 'cron', 'interval')),
                spec TEXT NOT NULL,
                anchor TEXT,
                timezone TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN
                    ('active', 'running', 'done', 'missed', 'failed', 'cancelled')),
                next_run_at TEXT,
                forced INTEGER NOT NULL DEFAULT 0,
                attempt INTEGER NOT NULL DEFAULT 0,
                creator TEXT NOT NULL,
                scope TEXT NOT NULL,
                frontend TEXT NOT NULL,
                target TEXT NOT NULL DEFAULT '{}',
                origin_session TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                last_run_at TEXT,
                last_status TEXT,
                runs INTEGER NOT NULL DEFAULT 0
            )""",
            # The next due task is one step down this index: O(log n) at any size.
            """CREATE INDEX scheduled_tasks_due ON scheduled_tasks(next_run_at)
               WHERE state = 'active'""",
            "CREATE INDEX scheduled_tasks_creator ON scheduled_tasks(creator, state)",
            """CREATE UNIQUE INDEX scheduled_tasks_one_heartbeat ON scheduled_tasks(kind)
               WHERE kind = 'heartbeat' AND state IN ('active', 'running')""",
            """CREATE TABLE task_runs (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                task_id INTEGER NOT NULL REFERENCES scheduled_tasks(id),
                due_at TEXT NOT NULL,
                started_at TEXT NOT NULL,
                finished_at TEXT,
                attempt INTEGER NOT NULL DEFAULT 0,
                status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'silent', 'failed',
                    'interrupted', 'missed', 'cancelled', 'refused')),
                session_id TEXT,
                output TEXT,
                error TEXT
            )""",
            "CREATE INDEX task_runs_task ON task_runs(task_id, id)",
            "CREATE INDEX task_runs_running ON task_runs(status) WHERE status = 'running'",
            # What is to be shown where: written in the same transaction as the run that
            # produced it, shown by whichever process runs that front-end.
            """CREATE TABLE deliveries (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                task_id INTEGER REFERENCES scheduled_tasks(id),
                run_id INTEGER REFERENCES task_runs(id),
                kind TEXT NOT NULL CHECK (kind IN ('reminder', 'result', 'notice')),
                frontend TEXT NOT NULL,
                target TEXT NOT NULL DEFAULT '{}',
                session_id TEXT,
                scope TEXT NOT NULL DEFAULT 'owner',
                text TEXT NOT NULL,
                created_at TEXT NOT NULL,
                claimed_by TEXT,
                claimed_at TEXT,
                noted_at TEXT,
                delivered_at TEXT,
                failed_at TEXT,
                attempts INTEGER NOT NULL DEFAULT 0
            )""",
            """CREATE INDEX deliveries_pending ON deliveries(frontend, id)
               WHERE delivered_at IS NULL AND failed_at IS NULL""",
        ],
    ),
    (
        "m007_session_heads",
        [
            # What a session declares before its history (tool specs, later the skills
            # index), fixed at its first turn and again at each compaction (``cut`` is the
            # summary's cut_message_id then, 0 before any): luna.agent.head owns the rule.
            """CREATE TABLE session_heads (
                session_id TEXT NOT NULL,
                cut INTEGER NOT NULL,
                head TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (session_id, cut)
            )""",
        ],
    ),
    (
        "m008_vector_model",
        [
            # The model every stored vector was made with (the store refuses a vector of any
            # other model than meta's embedding_model, so one search never mixes two models).
            "ALTER TABLE docs ADD COLUMN embed_model TEXT",
            """UPDATE docs SET embed_model = (SELECT value FROM meta WHERE key = 'embedding_model')
               WHERE embedded = 1""",
        ],
    ),
    (
        "m009_hook_events",
        [
            # Webhook events (luna.hooks.store): committed before the caller hears 202, run
            # once; (hook, signature) is unique, so a replayed request is refused.
            """CREATE TABLE hook_events (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                hook TEXT NOT NULL,
                signature TEXT NOT NULL,
                body TEXT NOT NULL,
                session_id TEXT NOT NULL,
                received_at TEXT NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running',
                    'done', 'silent', 'failed', 'interrupted')),
                started_at TEXT,
                finished_at TEXT,
                reply TEXT,
                error TEXT,
                UNIQUE (hook, signature)
            )""",
            "CREATE INDEX hook_events_state ON hook_events(state, id)",
        ],
    ),
    (
        "m010_message_attachments",
        [
            # The files a message carried (a user's, or the images a tool returned), in order;
            # the bytes live in the attachment store under ``sha256``.
            """CREATE TABLE message_attachments (
                message_id INTEGER NOT NULL REFERENCES messages(id),
                position INTEGER NOT NULL,
                kind TEXT NOT NULL,
                mime TEXT NOT NULL,
                name TEXT NOT NULL DEFAULT '',
                size INTEGER NOT NULL,
                sha256 TEXT NOT NULL,
                PRIMARY KEY (message_id, position)
            )""",
            "CREATE INDEX message_attachments_sha256 ON message_attachments(sha256)",
            # What the vision model said an image shows, once per content hash: the searchable
            # text of the messages that carry it, and what a text-only model reads instead.
            """CREATE TABLE image_descriptions (
                sha256 TEXT PRIMARY KEY,
                text TEXT NOT NULL,
                model TEXT NOT NULL,
                created_at TEXT NOT NULL
            )""",
        ],
    ),
    (
        "m011_matrix_sync",
        [
            # The Matrix front-end's sync position (luna.frontends.matrix.sync_token): the
            # ``next_batch`` token after the last batch whose messages Luna took in, one row per
            # bot account. With the database, so a backup or a restore keeps them together.
            """CREATE TABLE matrix_sync (
                user_id TEXT PRIMARY KEY,
                next_batch TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
        ],
    ),
    (
        "m012_channel_cursors",
        [
            # A chat app's read position (luna.frontends.channels.cursor): Telegram's update
            # offset, one row per bot account, kept with the database it acknowledges into.
            """CREATE TABLE channel_cursors (
                channel TEXT NOT NULL,
                account TEXT NOT NULL,
                cursor TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (channel, account)
            )""",
            # Turns whose user message is committed and acknowledged but not yet answered: a
            # row is written with the cursor that acknowledges its events and deleted once
            # the reply is sent, so a restart answers what a dead process left unanswered.
            """CREATE TABLE channel_turns (
                channel TEXT NOT NULL,
                account TEXT NOT NULL,
                event_id TEXT NOT NULL,
                message_id INTEGER NOT NULL,
                event TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (channel, account, event_id)
            )""",
        ],
    ),
    (
        "m013_matrix_taken",
        [
            # Matrix messages whose turn's user message is committed
            # (luna.frontends.matrix.taken): a batch synced again after a restart skips them.
            # Pruned by age when rows are added.
            """CREATE TABLE matrix_taken (
                user_id TEXT NOT NULL,
                event_id TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (user_id, event_id)
            )""",
            "CREATE INDEX matrix_taken_created_at ON matrix_taken(created_at)",
        ],
    ),
    (
        "m014_channel_turns_answered",
        [
            # A chat app's turns stay on record a while after they are answered
            # (luna.frontends.channels.cursor): ``answered_at`` is set instead of the row being
            # deleted, so an app that is handed an event again (Matrix) recognises it. That
            # makes ``matrix_taken`` a copy of ``channel_turns``, and Matrix's sync token is
            # the ledger's cursor like Telegram's offset: both move there and go.
            "ALTER TABLE channel_turns ADD COLUMN answered_at TEXT",
            "CREATE INDEX channel_turns_answered ON channel_turns(answered_at)",
            """INSERT OR IGNORE INTO channel_cursors (channel, account, cursor, updated_at)
               SELECT 'matrix', user_id, next_batch, updated_at FROM matrix_sync""",
            """INSERT OR IGNORE INTO channel_turns
               (channel, account, event_id, message_id, event, created_at, answered_at)
               SELECT 'matrix', user_id, event_id, 0, '{}', created_at, created_at
               FROM matrix_taken""",
            "DROP TABLE matrix_taken",
            "DROP TABLE matrix_sync",
        ],
    ),
    (
        "m015_forget_sessions",
        [
            # A session the user forgets is deleted with everything derived from it
            # (luna.memory.storage.forget). Its id sits in ``forgetting`` only inside that
            # transaction; the log stays append-only for every other session, always.
            "CREATE TABLE forgetting (session_id TEXT PRIMARY KEY)",
            "DROP TRIGGER messages_append_only_delete",
            """CREATE TRIGGER messages_append_only_delete BEFORE DELETE ON messages
               WHEN NOT EXISTS (SELECT 1 FROM forgetting WHERE session_id = OLD.session_id)
               BEGIN SELECT RAISE(ABORT, 'messages are append-only'); END""",
        ],
    ),
]
