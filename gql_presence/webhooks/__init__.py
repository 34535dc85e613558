"""Sending changes to webhooks: where requests may go, and one signed request."""
