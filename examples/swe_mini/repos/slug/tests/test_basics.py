import unittest

from textutil import words


class TestWords(unittest.TestCase):
    def test_words(self):
        self.assertEqual(words(" a  b "), ["a", "b"])
