"""What the service records as it runs: served answers, ratings and their review, version
stats and the alias audit, in one database (SQLite in the home folder by default, PostgreSQL
when ``TUNEDESK_DATABASE_URL`` names one). No torch here: feedback, serve and adapters use it."""
