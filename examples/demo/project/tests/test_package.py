import unittest

import textstats


class PackageTest(unittest.TestCase):
    def test_version_is_set(self):
        self.assertEqual(textstats.__version__, "0.1.0")
