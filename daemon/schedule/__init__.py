"""Initiative: schedules the agent keeps, the outbox of notices for the person, the greeting."""
