-- TuneDesk's store, first version. One schema for SQLite and PostgreSQL: {serial} is the one
-- dialect difference (an auto-numbered primary key), filled in by core/store/db.py.
-- JSON values (conversations, a rating's extra fields, an audit row) are kept as text.

CREATE TABLE answers (
    id TEXT PRIMARY KEY,
    adapter TEXT NOT NULL,
    version TEXT NOT NULL,
    engine TEXT NOT NULL,
    source TEXT NOT NULL,
    created TEXT NOT NULL,
    messages TEXT,
    answer TEXT,
    extra TEXT
);

-- one vote per answer and rater: a rater's new rating replaces the earlier one (rows imported
-- from ratings.jsonl have no rater; NULLs never clash, so none of them is lost)
CREATE TABLE ratings (
    seq {serial},
    id TEXT NOT NULL UNIQUE,
    answer_id TEXT NOT NULL,
    rater TEXT,
    created TEXT NOT NULL,
    rating TEXT NOT NULL,
    correction TEXT,
    adapter TEXT,
    version TEXT,
    engine TEXT,
    source TEXT,
    messages TEXT,
    answer TEXT,
    status TEXT NOT NULL,
    intent TEXT,
    extra TEXT,
    UNIQUE (answer_id, rater)
);

CREATE INDEX ratings_version ON ratings (adapter, version);

CREATE TABLE alias_audit (
    seq {serial},
    id TEXT NOT NULL UNIQUE,
    time TEXT NOT NULL,
    alias TEXT NOT NULL,
    body TEXT NOT NULL
);

CREATE INDEX alias_audit_alias ON alias_audit (alias);

-- each /v1 answer's outcome and timings, per version (the live figures of every replica)
CREATE TABLE answer_stats (
    seq {serial},
    version TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    outcome TEXT NOT NULL,
    first_token_s DOUBLE PRECISION,
    total_s DOUBLE PRECISION
);

CREATE INDEX answer_stats_version ON answer_stats (version, at);

-- the JSON-lines files imported at first start (each once; the files are left as they were)
CREATE TABLE imports (
    name TEXT PRIMARY KEY,
    at TEXT NOT NULL,
    rows_imported INTEGER NOT NULL
);
