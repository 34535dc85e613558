"""What a process holds live: its subscription to events and who follows what, deliveries, and
its held sessions."""
