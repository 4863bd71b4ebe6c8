"""Notifications: sinks (webhook, Slack, Feishu, DingTalk, WeCom, desktop), their configuration, the outbox."""
