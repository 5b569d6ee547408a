"""Sessions' permission requests, rules, and the supervisor's desk that answers them."""
