import unittest

from calendar_rules import is_leap


class TestIssue(unittest.TestCase):
    def test_centuries(self):
        self.assertFalse(is_leap(1900))
        self.assertTrue(is_leap(2000))
