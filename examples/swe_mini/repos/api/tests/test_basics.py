import unittest

from shop import price


class TestPrice(unittest.TestCase):
    def test_price(self):
        self.assertEqual(price("apple"), 120)
