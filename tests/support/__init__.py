"""Test support: real local stand-ins for external services (no mocks of components under test)."""
