"""What a check cell publishes and the grader reads: kept free of torch, so that the grading command starts fast
(it starts one process per submission, and none of them needs torch; the submission's kernel imports it)."""

CHECK_MIME = "application/vnd.gpu-memory-course.check+json"
STRICT_ENV = "COURSE_CHECKS_STRICT"  # "1" in the test suite: a solution whose check does not pass fails
READ_BY_HAND = "a reasoning that names the quantities it reasons with"  # a failed reasoning, listed for the instructor
