"""TVM's ``tvm.contrib`` helpers that TE programs call, under the same names: ``cc`` (link
object files into a library, for ``export_library(..., fcompile)``), ``cblas`` (a matrix
product as an extern op) and ``utils`` (temporary folders, ``which``)."""
