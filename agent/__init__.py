"""ftwiz-agent: runs on every node, reports health over authenticated HTTP. Never imports torch."""
