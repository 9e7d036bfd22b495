"""Item pipelines that persist pages (WARC and its index arrive in a later issue)."""
