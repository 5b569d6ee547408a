"""What sessions cost: tokens from transcripts, the supervisor's spend book, rate and usage limits."""
