"""Small ONNX models for aclpipe's importer tests, example and benchmark (see ``models.py``)."""
