"""Reports: results.json (the source of truth) and the Markdown matrix rendered from it."""
