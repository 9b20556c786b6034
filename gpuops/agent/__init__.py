"""What is put on a box and how the laptop talks to it.

The on-box agent's config, arming and status (agentctl), the detached-job protocol (jobio), the
bootstrap's inputs (bootstrap_config)."""
