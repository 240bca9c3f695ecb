import unittest

from calendar_rules import is_leap


class TestLeap(unittest.TestCase):
    def test_common_cases(self):
        self.assertTrue(is_leap(2024))
        self.assertFalse(is_leap(2023))
