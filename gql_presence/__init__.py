"""gql-presence: who is online, which friends are online, who was active when."""
