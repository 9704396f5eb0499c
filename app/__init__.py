"""The swarmscope desktop window: a thin Qt view over the Qt-free engine (DESIGN.md §2)."""
