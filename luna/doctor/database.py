"""``luna doctor``'s storage checks: SQLite's features, the schema, and the database (is it there,
is it sound, who runs on it, its backups).

Invariants:
- Nothing here writes: ``PRAGMA quick_check`` runs on a connection of its own, and a missing
  database is reported, never created.
- A database that fails ``quick_check`` is ✗ with the fix (``luna db recover``, then
  ``luna restore``; or the newest backup); a missing or empty one where the data folder shows
  one existed is ✗ too (the same signs ``Memory.open`` refuses on).
- Blocking work runs in the doctor's worker thread (``in_thread``).
"""

from __future__ import annotations

import time
from pathlib import Path

from luna import datafolder
from luna.config import Config
from luna.doctor.result import CheckResult, fail, in_thread, ok
from luna.memory.storage import db

BACKUP_WARN_DAYS = 2.0


def _soundness(path: Path) -> CheckResult:
    name = "database"
    if not path.exists() or path.stat().st_size == 0:
        signs = datafolder.database_signs(path)
        state = "is empty (0 bytes)" if path.exists() else "is missing"
        if not signs:
            return ok(name, f"{path} not created yet; the first start creates it")
        newest = datafolder.newest_backup(path)
        fix = f"luna restore {newest}" if newest else "put the file back if it was moved"
        return fail(
            name,
            f"{path} {state}, but the data folder shows one existed ({', '.join(signs)})",
            f"{fix}; or start over deliberately: luna --fresh-database",
        )
    started = time.monotonic()
    problems = db.quick_check(path)
    took = (time.monotonic() - started) * 1000
    if problems:
        newest = datafolder.newest_backup(path)
        back = f"; or go back to the newest backup: luna restore {newest}" if newest else ""
        shown = "not a SQLite database" if problems == [db.NOT_A_DATABASE] else (
            f"fails PRAGMA quick_check: {db.first_problem(chr(10).join(problems))}"
        )  # fmt: skip
        return fail(
            name,
            f"{path} {shown}; Luna will not write to it",
            "stop Luna, salvage what is readable into a new file with `luna db recover`, then "
            f"`luna restore` that file{back}",
        )
    size = path.stat().st_size / 1024**2
    return ok(name, f"{path}: {size:.1f} MB, quick_check ok ({took:.0f} ms)")


def _instance(cfg: Config) -> CheckResult:
    pid = datafolder.running_pid(cfg.data_dir)
    if pid is None:
        return ok("running Luna", f"none on {cfg.data_dir}")
    return ok("running Luna", f"pid {pid or 'unknown'} holds {cfg.data_dir} (a second is refused)")


def _backups(cfg: Config) -> CheckResult:
    path = cfg.memory.db_path
    newest = datafolder.newest_backup(path)
    keep = cfg.memory.backups_keep
    auto = f"daily, {keep} kept" if keep else "automatic backups off (memory.backups_keep = 0)"
    if newest is None:
        if not path.exists() or path.stat().st_size == 0:
            return ok("backups", f"none yet ({auto})")
        return fail(
            "backups",
            f"no backup in {datafolder.backups_dir(path)} yet ({auto})",
            "run `luna backup` now" + ("" if keep else "; set memory.backups_keep to 7"),
            essential=False,
        )
    age_days = (time.time() - newest.stat().st_mtime) / 86_400
    detail = f"newest {newest.name}, {age_days:.1f} days old ({auto})"
    if age_days > BACKUP_WARN_DAYS:
        return fail("backups", detail, "run `luna backup`; is Luna running?", essential=False)
    return ok("backups", detail)


def _held(cfg: Config) -> CheckResult | None:
    held = datafolder.held_file(cfg.memory.db_path)
    if not held.exists():
        return None
    count = sum(1 for line in held.read_bytes().split(b"\n") if line.strip())
    return fail(
        "held messages",
        f"{count} message(s) in {held} are not in the database yet",
        "they are written when the database takes writes again (at the next start of a "
        "sound database, or as soon as another program frees its lock)",
        essential=False,
    )


def _all(cfg: Config) -> list[CheckResult]:
    results = [_soundness(cfg.memory.db_path), _instance(cfg), _backups(cfg)]
    held = _held(cfg)
    return results + ([held] if held else [])


async def check_database(cfg: Config) -> list[CheckResult]:
    return await in_thread(_all, cfg)


async def check_sqlite(cfg: Config) -> list[CheckResult]:
    from luna.memory.storage.db import check_features

    f = await in_thread(check_features)
    out = []
    if f.fts5:
        out.append(ok("SQLite FTS5", f"SQLite {f.sqlite_version} with FTS5"))
    else:
        out.append(
            fail(
                "SQLite FTS5",
                f"SQLite {f.sqlite_version} lacks FTS5 ({f.fts5_error})",
                "pip install pysqlite3-binary into Luna's venv",
            )
        )
    if f.vector_enabled:
        out.append(ok("sqlite-vec", f"sqlite-vec {f.sqlite_vec} loads"))
    else:
        out.append(
            fail(
                "sqlite-vec",
                f"cannot load ({f.sqlite_vec_error}): memory recall is keyword-only (FTS)",
                "pip install sqlite-vec pysqlite3-binary into Luna's venv",
                essential=False,
            )
        )
    return out


def _schema_state(cfg: Config) -> CheckResult:
    from luna.memory.storage.store import MIGRATIONS

    path = cfg.memory.db_path
    known = [name for name, _ in MIGRATIONS]
    if not path.exists() or path.stat().st_size == 0:
        return ok("schema", f"no database yet: a new one gets {known[-1]} (see `database`)")
    conn = db.connect(path, load_vec=False)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        applied = []
        if "_migrations" in tables:
            applied = [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY rowid")]
        meta: dict[str, str] = {}
        if "meta" in tables:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    finally:
        conn.close()
    unknown = [n for n in applied if n not in known]
    if unknown:
        return fail(
            "schema",
            f"{path} has migrations this Luna does not know: {unknown} (made by a newer version)",
            "upgrade Luna, or restore a backup of the database made by this version",
        )
    pending = [n for n in known if n not in applied]
    stored = meta.get("embedding_model")
    if stored is not None and (
        stored != cfg.memory.vector_model
        or meta.get("embedding_dim") != str(cfg.memory.embedding_dim)
    ):
        return fail(
            "schema",
            f"{path} was embedded with {stored!r} ({meta.get('embedding_dim')} dims) but the "
            f"config says {cfg.memory.vector_model!r} ({cfg.memory.embedding_dim} dims)",
            "run `luna memory reindex`, or set memory.embedding_model back",
        )
    version = applied[-1] if applied else "empty"
    note = f"; {len(pending)} migration(s) apply on next start" if pending else ""
    return ok("schema", f"{path} at {version}{note}")


async def check_schema(cfg: Config) -> list[CheckResult]:
    try:
        return [await in_thread(_schema_state, cfg)]
    except Exception as e:  # a broken database is the finding
        return [
            fail(
                "schema",
                f"cannot read {cfg.memory.db_path}: {e}",
                "check the file's owner and permissions; if it is damaged, see the database "
                "check (`luna db recover`, `luna restore`)",
            )
        ]
