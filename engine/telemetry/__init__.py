"""Plain step records, the ring buffer the app reads, and trace files. Readers aggregate."""
