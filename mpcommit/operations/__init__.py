"""Operations on what jobs leave behind: pending uploads (list, price, the age- and job-bounded orphan abort)
and the bucket's lifecycle rule that aborts incomplete uploads."""
