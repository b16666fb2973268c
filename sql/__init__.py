"""The idempotent SQL API files (sql/NNN-topic.sql), shipped inside the package."""
