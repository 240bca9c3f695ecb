import unittest

from shop import total


class TestIssue(unittest.TestCase):
    def test_basket(self):
        self.assertEqual(total(["apple", "pear"]), 195)
