import unittest

from stack import Stack


class TestIssue(unittest.TestCase):
    def test_pop_is_lifo(self):
        s = Stack()
        s.push(1)
        s.push(2)
        self.assertEqual(s.pop(), 2)
