import unittest

from textutil import slugify


class TestIssue(unittest.TestCase):
    def test_slug_is_lowercase(self):
        self.assertEqual(slugify("Hello Big World"), "hello-big-world")
