"""The knowledge shelf: what the bot may answer from (past answers, articles, macros).

Files become passages (:mod:`knowledge.importers`), passages become immutable versions of a
named knowledge base with a SQLite FTS5 index each (:mod:`knowledge.store`,
:mod:`knowledge.index`), and a version answers searches ranked by BM25. Imports ``core`` only.
"""
