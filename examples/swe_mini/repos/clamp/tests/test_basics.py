import unittest

from numeric import clamp


class TestClamp(unittest.TestCase):
    def test_signature(self):
        self.assertTrue(callable(clamp))
