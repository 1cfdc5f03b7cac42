-- the knowledge warm-ups an admin asked to keep (POST /v1/knowledge/warm): each replica reads
-- them again into its llama-server's prompt cache whenever a new server starts
CREATE TABLE knowledge_warmups (
    model TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    updated TEXT NOT NULL
);
